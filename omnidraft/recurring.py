"""Recurring assistant work: the kind of requests one user sends day after day, each new but like
the last, for measuring a pair that remembers its answers (memory/). Written for OmniDraft; three
kinds, each prompt a chat turn built from a seeded generator, so any number of distinct prompts:

- ``tests``: pytest tests, or a docstring, for a function of one small codebase (``shopkit``: an
  online shop's helpers); the stream's functions and the held-out ones never overlap;
- ``extract``: an invoice (vendor, date, items, total) pasted as text, extracted into one JSON schema;
- ``reply``: a customer's complaint answered under one shop's policy, as its support team writes.

``recurring(kind, n, held=False)``: the stream's prompts (seeds 0..n-1) or the held-out ones
(their own seeds and, for ``tests``, their own functions); ``mixed(n, held)``: ``n`` of each kind,
the kinds taking turns. Knows the prompts; nothing about models.
"""

from __future__ import annotations

import random

from omnidraft.errors import OmniDraftError

KINDS = ("tests", "extract", "reply")

FUNCTIONS = [  # shopkit: (name, source); the last HELD_FUNCTIONS are held out of the stream
    ("cart_total", "def cart_total(items):\n    return sum(item.price * item.quantity for item in items)"),
    ("apply_discount", "def apply_discount(total, percent):\n    if not 0 <= percent <= 100:\n"
     "        raise ValueError(\"percent must be between 0 and 100\")\n    return round(total * (1 - percent / 100), 2)"),
    ("format_price", "def format_price(cents, currency=\"EUR\"):\n    return f\"{cents / 100:.2f} {currency}\""),
    ("parse_sku", "def parse_sku(sku):\n    category, number = sku.split(\"-\", 1)\n    return category.upper(), int(number)"),
    ("in_stock", "def in_stock(inventory, sku, wanted=1):\n    return inventory.get(sku, 0) >= wanted"),
    ("reserve", "def reserve(inventory, sku, quantity):\n    if inventory.get(sku, 0) < quantity:\n"
     "        raise KeyError(sku)\n    inventory[sku] -= quantity\n    return inventory[sku]"),
    ("shipping_cost", "def shipping_cost(weight_kg, express=False):\n    base = 4.90 if weight_kg <= 2 else 9.90\n"
     "    return base * 2 if express else base"),
    ("vat", "def vat(net, rate=0.2):\n    return round(net * rate, 2)"),
    ("gross", "def gross(net, rate=0.2):\n    return round(net + vat(net, rate), 2)"),
    ("coupon_valid", "def coupon_valid(code, used_codes):\n    return len(code) == 8 and code.isalnum() and code not in used_codes"),
    ("order_status", "def order_status(paid, shipped, delivered):\n    if delivered:\n        return \"delivered\"\n"
     "    if shipped:\n        return \"shipped\"\n    return \"paid\" if paid else \"pending\""),
    ("split_name", "def split_name(full_name):\n    first, _, last = full_name.strip().partition(\" \")\n"
     "    return first, last"),
    ("normalize_email", "def normalize_email(email):\n    local, _, domain = email.strip().partition(\"@\")\n"
     "    return f\"{local.lower()}@{domain.lower()}\""),
    ("average_rating", "def average_rating(ratings):\n    if not ratings:\n        return None\n"
     "    return round(sum(ratings) / len(ratings), 1)"),
    ("top_sellers", "def top_sellers(sales, n=3):\n    return sorted(sales, key=sales.get, reverse=True)[:n]"),
    ("restock_needed", "def restock_needed(inventory, threshold=5):\n"
     "    return sorted(sku for sku, count in inventory.items() if count < threshold)"),
    ("loyalty_points", "def loyalty_points(total):\n    return int(total // 10)"),
    ("delivery_days", "def delivery_days(country, express=False):\n    days = 2 if country == \"DE\" else 5\n"
     "    return max(1, days - 1) if express else days"),
    ("merge_carts", "def merge_carts(a, b):\n    merged = dict(a)\n    for sku, quantity in b.items():\n"
     "        merged[sku] = merged.get(sku, 0) + quantity\n    return merged"),
    ("refund_amount", "def refund_amount(paid, days_since_delivery):\n    if days_since_delivery > 30:\n"
     "        return 0.0\n    return paid if days_since_delivery <= 14 else round(paid / 2, 2)"),
    ("slugify", "def slugify(title):\n    return \"-\".join(word.lower() for word in title.split() if word.isalnum())"),
    ("bundle_price", "def bundle_price(prices, bundle_discount=0.1):\n"
     "    return round(sum(prices) * (1 - bundle_discount), 2) if len(prices) >= 3 else sum(prices)"),
    ("invoice_number", "def invoice_number(year, sequence):\n    return f\"INV-{year}-{sequence:05d}\""),
    ("mask_card", "def mask_card(number):\n    digits = number.replace(\" \", \"\")\n"
     "    return \"*\" * (len(digits) - 4) + digits[-4:]"),
    ("cheapest", "def cheapest(products):\n    return min(products, key=lambda p: p.price) if products else None"),
    ("weight_of", "def weight_of(items):\n    return round(sum(item.weight_kg * item.quantity for item in items), 3)"),
    ("price_per_kg", "def price_per_kg(price, weight_kg):\n    if weight_kg <= 0:\n"
     "        raise ValueError(\"weight must be positive\")\n    return round(price / weight_kg, 2)"),
    ("is_weekend_sale", "def is_weekend_sale(day):\n    return day.weekday() >= 5"),
    ("tax_region", "def tax_region(country):\n    return \"EU\" if country in {\"DE\", \"FR\", \"IT\", \"ES\", \"NL\"} else \"OTHER\""),
    ("return_window_open", "def return_window_open(delivered_on, today, days=30):\n"
     "    return (today - delivered_on).days <= days"),
    ("gift_wrap_fee", "def gift_wrap_fee(items):\n    return 2.5 * sum(1 for item in items if item.gift_wrap)"),
    ("stock_value", "def stock_value(inventory, prices):\n    return round(sum(count * prices[sku] for sku, count in inventory.items()), 2)"),
]
HELD_FUNCTIONS = 8
ASKS = ["Write pytest unit tests for this function from our shopkit module. Cover the normal case and the edge "
        "cases.\n\n```python\n{src}\n```",
        "Write a Google-style docstring for this function from our shopkit module and return the function with it."
        "\n\n```python\n{src}\n```"]

VENDORS = ["Nordlicht GmbH", "Acme Supplies Ltd", "Papeterie Dumas", "Blue Harbor Coffee", "Kowalski Tools",
           "Greenleaf Organics", "Sato Electronics", "Riverside Print Co"]
ITEMS = [("A4 copy paper, box", 24.90), ("Toner cartridge black", 79.00), ("USB-C cable 2 m", 9.50),
         ("Office chair", 189.00), ("Espresso beans 1 kg", 21.40), ("Desk lamp LED", 34.99),
         ("Whiteboard markers, 8 pack", 12.30), ("Laptop stand", 45.00), ("Cordless drill", 129.00),
         ("Shipping boxes, 20 pack", 18.75), ("Label printer tape", 15.20), ("Monitor 27 inch", 249.00)]
SCHEMA = ('{"vendor": str, "invoice_number": str, "date": "YYYY-MM-DD", "currency": str, '
          '"items": [{"description": str, "quantity": int, "unit_price": float}], "total": float}')

CUSTOMERS = ["Anna Schmidt", "James Carter", "Mei Lin", "Luca Rossi", "Fatima Noor", "Olivier Martin",
             "Sara Johansson", "Diego Alvarez", "Priya Patel", "Tom Becker"]
PRODUCTS = ["wireless headphones", "coffee grinder", "running shoes", "desk lamp", "backpack", "blender",
            "phone case", "winter jacket", "yoga mat", "electric kettle"]
COMPLAINTS = ["my order #{order} arrived {days} days late and the box was damaged",
              "the {product} I received in order #{order} stopped working after {days} days",
              "I was charged twice for order #{order} ({product})",
              "order #{order} is missing the {product} I paid for",
              "I returned the {product} from order #{order} {days} days ago and have not been refunded"]
POLICY = ("Policy: refunds within 14 days of delivery, replacements for defects within 2 years, late "
          "deliveries get a 10% voucher, double charges are reversed within 3 business days. Sign as "
          "\"The Northwind Shop support team\".")


def _tests(i: int, held: bool) -> str:
    """Each function with each ask before any prompt repeats."""
    pool = FUNCTIONS[-HELD_FUNCTIONS:] if held else FUNCTIONS[:-HELD_FUNCTIONS]
    return ASKS[(i // len(pool)) % len(ASKS)].format(src=pool[i % len(pool)][1])


def _extract(rng: random.Random) -> str:
    lines = rng.sample(ITEMS, rng.randint(2, 4))
    rows, total = [], 0.0
    for name, price in lines:
        qty = rng.randint(1, 6)
        total += qty * price
        rows.append(f"  {qty} x {name} @ {price:.2f}")
    date = f"{rng.randint(1, 28):02d}.{rng.randint(1, 12):02d}.2026"
    doc = (f"{rng.choice(VENDORS)}\nInvoice no. {rng.randint(1000, 99999)}    Date: {date}\n"
           + "\n".join(rows) + f"\nTotal due: {total:.2f} EUR")
    return f"Extract this invoice into JSON with exactly this schema: {SCHEMA}. Answer with the JSON only.\n\n{doc}"


def _reply(rng: random.Random) -> str:
    complaint = rng.choice(COMPLAINTS).format(order=rng.randint(10000, 99999), days=rng.randint(2, 20),
                                              product=rng.choice(PRODUCTS))
    return (f"Write our reply to this customer email. {POLICY}\n\nFrom: {rng.choice(CUSTOMERS)}\n"
            f"Hello, {complaint}. What are you going to do about it?")


def recurring(kind: str, n: int, held: bool = False) -> list[str]:
    """``n`` prompts of ``kind`` (user turns for the chat template): the stream's, or the held-out ones."""
    if kind not in KINDS:
        raise OmniDraftError(f"unknown recurring kind {kind!r}", f"use {', '.join(KINDS)}")
    out = []
    for i in range(n):
        rng = random.Random(f"{kind}:{'held' if held else 'stream'}:{i}")
        out.append(_tests(i, held) if kind == "tests" else _extract(rng) if kind == "extract" else _reply(rng))
    return out


def mixed(n: int, held: bool = False) -> list[str]:
    """``n`` prompts of each kind, the kinds taking turns (a day's work as it arrives)."""
    return [p for turn in zip(*(recurring(kind, n, held) for kind in KINDS)) for p in turn]
