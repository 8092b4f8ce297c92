"""A small synthetic English-like corpus for end-to-end tests: sentences
from a fixed grammar, so a model can learn it in a few dozen steps.

write_corpus(directory, documents, seed) writes doc-0000.txt, ...
prepare_data(worker, root) writes one under root and prepares it for
training with `plateau-worker data prepare` (a 320-word vocabulary).
"""

import os
import random
import subprocess

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the teacher",
            "a small bird", "the farmer", "our neighbour"]
VERBS = ["sees", "likes", "follows", "feeds", "calls", "watches", "finds"]
OBJECTS = ["the ball", "a red apple", "the river", "her friend", "the house",
           "a quiet song", "the green field", "his brother"]
ENDINGS = ["in the morning", "after dinner", "every day", "near the river",
           "with great care", "before the rain"]


def sentence(rng):
    words = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
    if rng.random() < 0.5:
        words.append(rng.choice(ENDINGS))
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def write_corpus(directory, documents, seed=0):
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for index in range(documents):
        paragraphs = []
        for _ in range(rng.randint(2, 4)):
            paragraphs.append(" ".join(sentence(rng)
                                       for _ in range(rng.randint(3, 6))))
        with open(os.path.join(directory, f"doc-{index:04d}.txt"), "w") as f:
            f.write("\n".join(paragraphs) + "\n")


def prepare_data(worker, root, documents=200, seed=3):
    """Writes a corpus to root/corpus, prepares it into root/data with
    `worker data prepare --vocab=320`, and returns root/data."""
    corpus = os.path.join(root, "corpus")
    write_corpus(corpus, documents=documents, seed=seed)
    data = os.path.join(root, "data")
    subprocess.run([worker, "data", "prepare", f"--input={corpus}",
                    f"--output={data}", "--vocab=320"], check=True,
                   capture_output=True)
    return data
