"""Multi-turn assistant conversations for the serving benchmark (`omnidraft bench serve`): three
user turns each (edits of code pasted in the first turn, a fix, a rewrite and a quote of a note,
changes to a config file, and plain follow-ups), each turn reading the conversation so far.
Written for OmniDraft's serving benchmark; never calibrated or trained on.

Knows the prompts; nothing about models or servers.
"""

from __future__ import annotations

CART = '''class Cart:
    def __init__(self):
        self.items = {}

    def add(self, name, price, qty=1):
        if name in self.items:
            self.items[name][1] += qty
        else:
            self.items[name] = [price, qty]

    def remove(self, name):
        del self.items[name]

    def total(self):
        return sum(p * q for p, q in self.items.values())
'''
NOTE = ("Our team will move the weekly planning meeting from Monday at 9:00 to Tuesday at 10:30, starting next "
        "week. The room stays the same (4B, second floor). Please bring your status notes, and if you cannot attend, "
        "send them to Dana before the meeting. The first meeting on the new day will also cover the Q3 budget.")
CONFIG = '''server:
  host: 0.0.0.0
  port: 8080
  workers: 4
database:
  url: postgres://app@db:5432/app
  pool_size: 10
logging:
  level: info
  file: /var/log/app.log
'''
PARSE = '''def parse_line(line):
    parts = line.strip().split(",")
    name = parts[0]
    age = int(parts[1])
    city = parts[2]
    return {"name": name, "age": age, "city": city}


def parse_file(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(parse_line(line))
    return rows
'''
CONVERSATIONS = [
    [f"Here is my code:\n```python\n{PARSE}```\nAdd type hints to both functions and show the whole code.",
     "Now rename `parts` to `fields` everywhere and show the whole code again.",
     "Add a docstring to parse_file. Show only that function."],
    [f"Here is cart.py:\n```python\n{CART}```\nremove() crashes on a missing item. Fix it and show the class.",
     "Add a method `count()` returning the number of items (quantities summed). Show the whole class.",
     "What does total() return for an empty cart?"],
    [f"Rewrite this note in a more formal tone:\n\n{NOTE}",
     "Make it shorter: at most three sentences.",
     "Quote the sentence of the original note that mentions the budget, exactly."],
    [f"This is config.yaml:\n```yaml\n{CONFIG}```\nWhich port does the server listen on?",
     "Change the port to 9090 and the log level to debug. Show the whole file.",
     "Add a `timeout: 30` key under server and show the whole file again."],
    ["Explain binary search in two sentences.",
     "Write an iterative binary search in Python.",
     "Now write three pytest tests for it."],
    ["Write a SQL table `orders` with id, customer, amount and created_at.",
     "Write a query for each customer's total amount in 2026, largest first.",
     "Change the query to show only customers whose total is over 1000."],
]



def conversations() -> list[list[str]]:
    """Each conversation's user turns, in order."""
    return [list(turns) for turns in CONVERSATIONS]
