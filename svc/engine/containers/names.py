"""Generated container names, ``adjective_scientist`` as dockerd makes them."""

from __future__ import annotations

import secrets

ADJECTIVES = (
    "admiring", "adoring", "agitated", "amazing", "angry", "awesome", "blissful", "bold",
    "boring", "brave", "clever", "cocky", "compassionate", "condescending", "cranky",
    "dazzling", "determined", "distracted", "dreamy", "eager", "ecstatic", "elastic",
    "elated", "elegant", "epic", "fervent", "festive", "focused", "friendly", "frosty",
    "gallant", "gifted", "goofy", "gracious", "happy", "hopeful", "hungry", "infallible",
    "inspiring", "jolly", "jovial", "keen", "kind", "laughing", "loving", "lucid", "modest",
    "musing", "mystifying", "naughty", "nervous", "nifty", "nostalgic", "objective",
    "optimistic", "peaceful", "pedantic", "pensive", "practical", "priceless", "quirky",
    "quizzical", "relaxed", "reverent", "romantic", "sad", "serene", "sharp", "silly",
    "sleepy", "stoic", "stupefied", "suspicious", "tender", "thirsty", "trusting", "upbeat",
    "vibrant", "vigilant", "wizardly", "wonderful", "xenodochial", "youthful", "zealous", "zen")
SCIENTISTS = (
    "albattani", "allen", "almeida", "archimedes", "ardinghelli", "aryabhata", "austin",
    "babbage", "banach", "bardeen", "bartik", "bassi", "bell", "bhabha", "bhaskara",
    "blackwell", "bohr", "booth", "borg", "bose", "boyd", "brahmagupta", "brattain", "brown",
    "carson", "chandrasekhar", "curie", "darwin", "davinci", "dijkstra", "einstein",
    "elion", "engelbart", "euclid", "euler", "fermat", "fermi", "feynman", "franklin",
    "galileo", "gates", "goldberg", "goldstine", "goldwasser", "golick", "goodall", "hamilton",
    "hawking", "heisenberg", "hermann", "hodgkin", "hoover", "hopper", "hugle", "hypatia",
    "jang", "jennings", "jepsen", "joliot", "jones", "kalam", "kare", "keller", "khorana",
    "kilby", "kirch", "knuth", "kowalevski", "lalande", "lamarr", "lamport", "leakey",
    "leavitt", "lovelace", "lumiere", "mayer", "mccarthy", "mcclintock", "mclean", "mcnulty",
    "meitner", "meninsky", "mestorf", "minsky", "mirzakhani", "morse", "murdock", "newton",
    "nightingale", "nobel", "noether", "northcutt", "noyce", "panini", "pare", "pasteur",
    "payne", "perlman", "pike", "poincare", "poitras", "ptolemy", "raman", "ramanujan",
    "ride", "ritchie", "roentgen", "rosalind", "saha", "sammet", "shaw", "shirley",
    "shockley", "sinoussi", "snyder", "spence", "stallman", "stonebraker", "swanson",
    "swartz", "swirles", "tesla", "thompson", "torvalds", "turing", "varahamihira",
    "visvesvaraya", "volhard", "wescoff", "wiles", "williams", "wilson", "wing", "wozniak",
    "wright", "yalow", "yonath")


def generate(retry: int = 0) -> str:
    """A random name; after a collision (``retry`` > 0) a digit is appended, as dockerd does."""
    name = f"{secrets.choice(ADJECTIVES)}_{secrets.choice(SCIENTISTS)}"
    if name == "boring_wozniak":  # Steve Wozniak is not boring (dockerd's rule)
        return generate(retry)
    return f"{name}{secrets.randbelow(10)}" if retry else name
