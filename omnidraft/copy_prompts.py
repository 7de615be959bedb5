"""A copy-heavy prompt set: assistant work whose answer repeats its context (code edits of
HumanEval functions, answers that quote a passage, rewrites and corrections, follow-up turns that
reuse the previous answer). Written for OmniDraft (no such set ships offline); 24 conversations,
each a list of user turns: the last turn is the one measured, earlier turns are generated first.

Knows the prompts; nothing about models.
"""

from __future__ import annotations

import gzip
import json

from omnidraft.prompts import humaneval_path

EDITS = [  # (HumanEval task, instruction)
    (2, "Rename the function `truncate_number` to `decimal_part` and give me the whole function back."),
    (4, "Add a comment above every line of the body explaining it, and return the complete function."),
    (5, "Rename the parameter `numbers` to `values` everywhere and return the complete code."),
    (7, "Change the function so it also accepts an optional `case_sensitive: bool = True` argument "
        "and return the whole function."),
    (8, "Add input validation that raises TypeError when `numbers` is not a list, and return the full function."),
    (9, "Remove the doctest examples from the docstring and return the whole function otherwise unchanged."),
    (11, "Rename `string_xor` to `xor_strings` and return the complete function with its docstring."),
    (3, "Return this function again with type hints checked and a one-line summary added at the top of "
        "the docstring."),
]

PASSAGES = [
    "The Great Barrier Reef is the world's largest coral reef system, composed of over 2,900 individual "
    "reefs and 900 islands stretching for over 2,300 kilometres over an area of approximately 344,400 "
    "square kilometres. The reef is located in the Coral Sea, off the coast of Queensland, Australia. "
    "It can be seen from outer space and is the world's biggest single structure made by living "
    "organisms. This reef structure is composed of and built by billions of tiny organisms, known as "
    "coral polyps.",
    "Photosynthesis is the process by which green plants and some other organisms use sunlight to "
    "synthesize foods from carbon dioxide and water. Photosynthesis in plants generally involves the "
    "green pigment chlorophyll and generates oxygen as a byproduct. The light-dependent reactions take "
    "place in the thylakoid membranes, while the Calvin cycle takes place in the stroma of the "
    "chloroplast.",
    "The Python programming language was created by Guido van Rossum and first released in 1991. Its "
    "design philosophy emphasizes code readability with the use of significant indentation. Python is "
    "dynamically typed and garbage-collected, and it supports multiple programming paradigms, "
    "including structured, object-oriented and functional programming.",
]

QUESTIONS = [
    (0, "Quote, word for word, the sentence that says where the reef is located."),
    (0, "Copy the first sentence of the passage exactly, then say in a few words what it means."),
    (1, "Which sentence mentions chlorophyll? Quote it exactly."),
    (1, "Quote the sentence about where the light-dependent reactions and the Calvin cycle take place."),
    (2, "Quote the sentence that names Python's creator, exactly as written."),
    (2, "Copy the last sentence of the passage verbatim and list the paradigms it names."),
]

TYPOS = [
    "Yesterday I went too the market and buyed some fresh vegetables, but I forgot to bring my bag so I "
    "had to carry everything in my hands all the way home.",
    "Their are many reasons why people enjoy reading books, including the chance to learn new things, "
    "to relax after a long day, and to visit places they will never see in real life.",
    "The meeting has been moved from tuesday to thursday becuase several members of the team are "
    "traveling, please update you calendars and let me know if the new time does not work.",
    "Our new product is designed to help small businesses manage there inventory, track sales, and "
    "communicate with customers, all from one simple app that runs on any phone.",
    "The childrens museum will be close for renovations until the end of march; during this time, the "
    "outdoor garden and the cafe will remain open to visiters on weekends.",
    "When you recieve this letter, please sign both copys of the contract and send one back to our "
    "office, keeping the other for you're records.",
]

REWRITES = [
    "Fix the spelling and grammar mistakes in this paragraph and return the corrected paragraph only:\n\n",
    "Correct the errors in the following text. Reply with the corrected text and nothing else:\n\n",
]

FOLLOW_UPS = [  # (first turn, follow-up that reuses the first answer)
    ("Write a Python function `is_prime(n)` that returns True when n is prime.",
     "Now add a docstring with two examples and give me the whole function again."),
    ("Write a Python class `Stack` with push, pop and is_empty methods.",
     "Add a `peek` method and type hints, and show me the complete class again."),
    ("Write a short paragraph describing the water cycle.",
     "Repeat the same paragraph, but put the key term of each sentence in bold."),
    ("Write a haiku about autumn leaves.",
     "Write the same haiku again, then a second one in the same style about winter."),
]


def _functions() -> list[dict]:
    with gzip.open(humaneval_path(), "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def copy_prompts() -> list[list[str]]:
    """24 conversations (lists of user turns): 8 code edits, 6 grounded quotes, 6 rewrites, 4 follow-ups."""
    rows = _functions()
    edits = [[f"{instruction}\n\n```python\n{(rows[i]['prompt'] + rows[i]['canonical_solution']).strip()}\n```"]
             for i, instruction in EDITS]
    quotes = [[f"Read this passage:\n\n{PASSAGES[p]}\n\n{question}"] for p, question in QUESTIONS]
    rewrites = [[REWRITES[i % 2] + text] for i, text in enumerate(TYPOS)]
    follow_ups = [list(turns) for turns in FOLLOW_UPS]
    return edits + quotes + rewrites + follow_ups
