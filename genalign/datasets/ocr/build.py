"""Build the OCR prompt lists `train.txt` and `test.txt` (deterministic, offline).

Every prompt reads `A ... that says "<text>"`: an object that carries text (a sign, a poster,
a cake, a licence plate, ...) with a style, a setting and sometimes a photographic framing,
then exactly one double-quoted target. The OCR reward (genalign/rewards/ocr.py) reads the
text between the quotes, lower-cased with spaces removed, and compares it with what an OCR
model recognises in the image.

Targets come from word lists written below (short words, 2-3 word phrases, numbers, names,
plate-like codes). Each split draws targets kind by kind with fixed weights, and a target
(normalised like the reward does) is used once across both splits, so train and test
texts are disjoint: the test set measures whether the policy learned to *render text*,
not whether it memorised the training strings.

    python genalign/datasets/ocr/build.py           # rewrite train.txt and test.txt
    python genalign/datasets/ocr/build.py --check   # exit 1 if the committed files differ from a fresh build

The output is a pure function of SEED and the lists below (Python's `random.Random`
algorithms for `shuffle`/`choice`/`random` are stable across versions), so re-running the
script reproduces the committed files byte for byte.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path

SEED = 20240521
TRAIN_SIZE = 2000
TEST_SIZE = 200
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # genalign/datasets/build_common.py
from build_common import write_or_check  # noqa: E402

# ----------------------------------------------------------------------------- targets
WORDS = """
OPEN CLOSED SALE EXIT ENTER PUSH PULL STOP GO WELCOME HELLO GOODBYE THANKS SORRY YES NO MAYBE
COFFEE TEA BREAD PIZZA PASTA SUSHI TACOS BURGERS DONUTS BAGELS WAFFLES PANCAKES NOODLES SOUP
SALAD JUICE SMOOTHIE LEMONADE COCOA CHAI ESPRESSO LATTE MOCHA GELATO CANDY COOKIES CUPCAKES
PIE CHEESE HONEY JAM BUTTER MILK EGGS APPLES PEARS PLUMS CHERRIES MANGO BANANAS BERRIES
BAKERY CAFE DINER BISTRO DELI MARKET PHARMACY LIBRARY MUSEUM THEATER CINEMA STUDIO GALLERY
GARAGE HOTEL MOTEL HOSTEL INN SCHOOL COLLEGE STATION HARBOR AIRPORT PARK GARDEN ZOO FARM
DREAM HOPE LOVE PEACE JOY FAITH CALM BRAVE SMILE LAUGH SHINE RELAX BREATHE FOCUS CREATE
EXPLORE WANDER BELIEVE IMAGINE INSPIRE ADVENTURE FREEDOM HARMONY KINDNESS COURAGE WISDOM
SUNSHINE MOONLIGHT STARLIGHT RAINBOW THUNDER LIGHTNING BLIZZARD TORNADO HURRICANE SUNRISE
SUNSET TWILIGHT MIDNIGHT DAYBREAK AUTUMN WINTER SPRING SUMMER OCEAN RIVER MOUNTAIN FOREST
DESERT ISLAND VALLEY CANYON MEADOW PRAIRIE GLACIER VOLCANO LAGOON TIGER LION BEAR WOLF FOX
EAGLE FALCON OWL RAVEN DOLPHIN WHALE SHARK OCTOPUS TURTLE PANDA KOALA OTTER BEAVER MOOSE
DRAGON PHOENIX UNICORN GRIFFIN KRAKEN ROBOT ROCKET GALAXY PLANET COMET NEBULA ORBIT LASER
PIXEL CIRCUIT QUANTUM ATOM MAGNET ENGINE TURBO NITRO VELOCITY MOMENTUM GRAVITY ECHO VORTEX
DANGER WARNING CAUTION DETOUR YIELD ONEWAY FRAGILE PRIVATE QUIET SILENCE ENTRANCE RESERVED
VACANCY LOBBY ELEVATOR STAIRS RESTROOM KITCHEN OFFICE STORAGE BASEMENT ATTIC BALCONY ROOFTOP
JAZZ BLUES FUNK DISCO TECHNO SALSA TANGO WALTZ OPERA BALLET KARAOKE POETRY CHESS BINGO
BOWLING SURFING SKATING HIKING CAMPING FISHING SAILING ROWING CYCLING RUNNING BOXING KARATE
YOGA PILATES ZUMBA TENNIS GOLF HOCKEY SOCCER RUGBY CRICKET BASEBALL VINTAGE RETRO MODERN
CLASSIC ROYAL GOLDEN SILVER CRIMSON SCARLET AZURE VIOLET EMERALD AMBER IVORY COBALT JADE
VELVET MARBLE GRANITE COPPER BRONZE TIMBER CANVAS PAPER RIBBON LANTERN CANDLE COMPASS ANCHOR
"""

PHRASES = """
OPEN LATE|OPEN 24 HOURS|NO PARKING|KEEP OUT|STAFF ONLY|WET PAINT|MIND THE GAP|SLOW DOWN
DEAD END|ROAD CLOSED|FRESH BREAD|HOT COFFEE|ICE COLD BEER|FREE WIFI|CASH ONLY|NOW HIRING
GRAND OPENING|CLOSING SOON|BACK SOON|COME IN|PLEASE KNOCK|NO SMOKING|HAPPY BIRTHDAY
MERRY CHRISTMAS|HAPPY NEW YEAR|GOOD MORNING|GOOD NIGHT|SWEET DREAMS|STAY WILD|STAY HUMBLE
BE KIND|DREAM BIG|NEVER GIVE UP|LESS IS MORE|HOME SWEET HOME|JUST MARRIED|WELL DONE
THANK YOU|SEE YOU SOON|LOVE YOU|MISS YOU|GOOD VIBES|TAKE A BREAK|BUT FIRST COFFEE
LIVE LAUGH LOVE|CARPE DIEM|BON APPETIT|HAKUNA MATATA|LET IT BE|HERE COMES THE SUN
FOLLOW YOUR HEART|ALL YOU NEED IS LOVE|MAKE IT HAPPEN|DO IT NOW|SALE ENDS SOON|BUY ONE GET ONE
LAST CHANCE|SOLD OUT|LIMITED EDITION|BEST IN TOWN|SINCE FOREVER|FAMILY OWNED|HANDMADE GOODS
LOCAL HONEY|FARM FRESH|ORGANIC PRODUCE|DAILY SPECIALS|TODAY ONLY|HAPPY HOUR|LIVE MUSIC
OPEN MIC NIGHT|TRIVIA TUESDAY|TACO TUESDAY|PIZZA FRIDAY|BRUNCH ALL DAY|KIDS EAT FREE
PETS WELCOME|NO DOGS ALLOWED|BEWARE OF DOG|PRIVATE PROPERTY|AUTHORIZED PERSONNEL ONLY
EMERGENCY EXIT|FIRE ESCAPE|FIRST AID|LOST AND FOUND|INFORMATION DESK|TICKET OFFICE
PLATFORM FOUR|GATE CLOSED|LOADING ZONE|BUS STOP|TAXI RANK|BIKE LANE|SCHOOL ZONE
"""

ADJECTIVES = """
BIG LITTLE TINY GIANT HAPPY SLEEPY LUCKY MIGHTY SNEAKY SILLY CRAZY WILD QUIET LOUD FAST SLOW
HOT COLD COZY SUNNY RAINY STORMY FROSTY MISTY DUSTY RUSTY SHINY SPARKLY GOLDEN SILVER PURPLE
ORANGE GREEN BLUE RED PINK BLACK WHITE SECRET HIDDEN ANCIENT
""".split()

NOUNS = """
CAT DOG BIRD FISH FROG GOAT DUCK BEE ANT MOUSE BEAR FOX OWL CROW TOAD SNAIL CRAB SEAL PONY
MOON STAR SUN CLOUD STORM WAVE ROCK TREE LEAF ROSE DAISY ACORN PEACH LEMON PLUM BEAN PEPPER
KETTLE TEAPOT SPOON LAMP CLOCK
""".split()

NAMES = """
Maria Luca Sofia Noah Emma Liam Olivia Mateo Ava Leo Mia Hugo Zoe Omar Lena Felix Nora Ivan
Chloe Diego Hana Kenji Aisha Ravi Priya Tariq Ingrid Sven Freya Anya Dmitri Elena Pablo Rosa
Marco Giulia Jonas Clara Oscar Alma Yuki Mei Chen Arjun Leila Samir Nadia Erik Astrid Bruno
Carmen Dario Elsa Farah Gustav Helga Idris Jade Kofi Lola Milo Nina Otto Pia Quinn Rafael
Selma Theo Uma Vera Wanda Xavier Yara Zane Bianca Cyrus Delia Enzo Flora Gemma Hector Iris
""".split()

NAME_PATTERNS = [
    "{name}",
    "{name}'s Bakery",
    "{name}'s Cafe",
    "Cafe {name}",
    "Hello {name}",
    "Team {name}",
    "{name}'s Garage",
    "Happy Birthday {name}",
    "Villa {name}",
    "{name} and Co",
]


def number_targets() -> list[str]:
    """Years, prices, room/route/platform numbers, phone-style and opening-hours strings."""
    targets = [str(year) for year in range(1950, 2031)]
    targets += [f"${dollars}.99" for dollars in range(1, 60)]
    targets += [f"Room {number}" for number in range(101, 121)] + [f"Room {number}" for number in range(201, 221)]
    targets += [f"Route {number}" for number in (1, 5, 9, 12, 17, 24, 33, 40, 51, 66, 77, 80, 95, 101)]
    targets += [f"No. {number}" for number in range(1, 61)]
    targets += [f"Gate {letter}{number}" for letter in "ABCD" for number in range(1, 13)]
    targets += [f"{hour} AM - {hour + 3} PM" for hour in range(6, 12)]
    targets += [f"555-{number:04d}" for number in range(1200, 1260)]
    return targets


def code_targets(rng: random.Random, count: int) -> list[str]:
    """Plate-like codes `ABC 123` / `AB12 CDE`, without letters that read as digits (I, O)."""
    letters = "ABCDEFGHJKLMNPRSTUVWXYZ"
    codes: list[str] = []
    while len(codes) < count:
        if rng.random() < 0.5:
            code = "".join(rng.choice(letters) for _ in range(3)) + " " + str(rng.randrange(100, 1000))
        else:
            code = (
                "".join(rng.choice(letters) for _ in range(2))
                + str(rng.randrange(10, 100))
                + " "
                + "".join(rng.choice(letters) for _ in range(3))
            )
        if code not in codes:
            codes.append(code)
    return codes


def target_pools(rng: random.Random) -> dict[str, list[str]]:
    """Candidate texts per kind, each list shuffled (the split draws from the front)."""
    phrases = [phrase.strip() for phrase in " ".join(PHRASES.split("\n")).split("|") if phrase.strip()]
    phrases += [f"{adjective} {noun}" for adjective in ADJECTIVES for noun in NOUNS]
    pools = {
        "word": WORDS.split(),
        "phrase": phrases,
        "number": number_targets(),
        "name": [pattern.format(name=name) for name in NAMES for pattern in NAME_PATTERNS],
        "code": code_targets(rng, 400),
    }
    for pool in pools.values():
        rng.shuffle(pool)
    return pools


KIND_WEIGHTS = {"word": 0.10, "phrase": 0.45, "number": 0.13, "name": 0.20, "code": 0.12}

# ----------------------------------------------------------------------------- scenes
SETTINGS = {
    "street": [
        "on a busy city street",
        "in a quiet village",
        "at night",
        "in the rain",
        "at golden hour",
        "on a snowy morning",
        "next to a canal",
        "in a crowded market",
        "on a foggy evening",
        "in a small seaside town",
        "under a clear blue sky",
        "in a neon-lit alley",
    ],
    "indoor": [
        "in a cozy kitchen",
        "in a busy office",
        "on a classroom wall",
        "in a dim hallway",
        "in a sunlit living room",
        "in a school gym",
        "in a hotel lobby",
        "in a train station",
    ],
    "table": [
        "on a wooden table",
        "on a marble countertop",
        "at a birthday party",
        "on a picnic blanket",
        "in a bakery display case",
        "on a kitchen counter",
        "next to a window",
    ],
    "worn": [
        "worn by a smiling man",
        "worn by a young woman",
        "hanging on a clothesline",
        "folded on a shop shelf",
        "worn by a street musician",
        "on a mannequin",
    ],
    "car": [
        "on a parked car",
        "on a red sports car",
        "on a dusty pickup truck",
        "on a vintage car",
        "on a white delivery van",
        "on a taxi in traffic",
    ],
    "shelf": [
        "on a bookshop shelf",
        "on a library table",
        "lying on a bed",
        "in a shop window",
        "on a desk next to a lamp",
    ],
}


@dataclass(frozen=True)
class Carrier:
    """An object that carries text: its noun, styles that fit it, settings and target kinds."""

    noun: str
    styles: tuple[str, ...]
    setting: str
    kinds: tuple[str, ...]


GENERAL = ("word", "phrase", "name")
CARRIERS = [
    Carrier(
        "sign",
        ("wooden", "hand-painted", "rusty metal", "weathered", "bright yellow", "enamel"),
        "street",
        GENERAL + ("number",),
    ),
    Carrier("poster", ("vintage", "minimalist", "colorful", "torn", "art deco", "retro travel"), "street", GENERAL),
    Carrier("shop front", ("charming", "old-fashioned", "modern glass", "brick", "pastel"), "street", GENERAL),
    Carrier(
        "neon sign",
        ("glowing pink", "flickering blue", "bright red", "retro", "buzzing green"),
        "street",
        GENERAL + ("number",),
    ),
    Carrier("chalkboard", ("small", "cafe", "hand-lettered", "dusty", "sidewalk"), "street", GENERAL + ("number",)),
    Carrier("t-shirt", ("white cotton", "black", "faded vintage", "tie-dye", "oversized"), "worn", GENERAL),
    Carrier("hoodie", ("gray", "navy", "bright orange", "cozy"), "worn", GENERAL),
    Carrier(
        "book cover",
        ("hardcover", "paperback", "leather-bound", "illustrated", "minimalist"),
        "shelf",
        ("word", "phrase", "name"),
    ),
    Carrier(
        "birthday cake",
        ("chocolate", "strawberry", "three-tier", "vanilla", "frosted"),
        "table",
        ("name", "phrase", "number"),
    ),
    Carrier("coffee mug", ("ceramic", "chipped", "enamel", "oversized"), "table", GENERAL),
    Carrier("license plate", ("yellow", "white", "old", "dirty"), "car", ("code",)),
    Carrier("bumper sticker", ("faded", "glossy", "round", "peeling"), "car", ("word", "phrase")),
    Carrier("billboard", ("huge", "roadside", "digital", "weathered"), "street", GENERAL + ("number",)),
    Carrier("street banner", ("long", "festival", "cloth", "colorful"), "street", GENERAL),
    Carrier("storefront window decal", ("gold-leaf", "white vinyl", "curved"), "street", GENERAL),
    Carrier("greeting card", ("handmade", "watercolor", "glittery", "folded"), "table", ("phrase", "name")),
    Carrier("doormat", ("coir", "rubber", "welcome"), "street", ("word", "phrase")),
    Carrier("protest placard", ("cardboard", "handwritten", "colorful"), "street", ("word", "phrase")),
    Carrier("restaurant menu board", ("chalk", "illuminated", "wooden"), "indoor", GENERAL + ("number",)),
    Carrier("office door plaque", ("brass", "engraved", "frosted glass"), "indoor", ("name", "number")),
    Carrier("whiteboard", ("messy", "clean", "office"), "indoor", GENERAL + ("number",)),
    Carrier("cardboard box", ("brown", "taped-up", "stacked"), "indoor", ("word", "phrase", "code")),
    Carrier("price tag", ("paper", "handwritten", "bright orange"), "indoor", ("number",)),
    Carrier("sports jersey", ("red", "striped", "blue"), "worn", ("name", "number")),
    Carrier("scoreboard", ("electronic", "old stadium", "glowing"), "street", ("number", "word")),
    Carrier("train departure board", ("flip-dot", "digital", "old split-flap"), "indoor", ("number", "code", "word")),
    Carrier("tote bag", ("canvas", "linen", "printed"), "worn", GENERAL),
    Carrier("graffiti mural", ("bold", "spray-painted", "colorful"), "street", ("word", "phrase")),
    Carrier("mailbox", ("red", "rustic", "metal"), "street", ("name", "number")),
    Carrier("pizza box", ("greasy", "stacked", "cardboard"), "table", ("word", "phrase", "name")),
]

FRAMINGS = [
    "",
    "",
    "",
    "photo of ",
    "close-up photo of ",
    "picture of ",
    "vintage photograph of ",
    "digital illustration of ",
    "watercolor painting of ",
    "3D render of ",
]


def with_article(phrase: str) -> str:
    """`a` / `an` by the first letter (good enough for the words in this file)."""
    return ("an " if phrase[0].lower() in "aeiou" else "a ") + phrase


def make_prompt(rng: random.Random, text: str, kind: str) -> str:
    carrier = rng.choice([carrier for carrier in CARRIERS if kind in carrier.kinds])
    thing = with_article(f"{rng.choice(carrier.styles)} {carrier.noun}")
    setting = rng.choice(SETTINGS[carrier.setting])
    framing = rng.choice(FRAMINGS)
    body = with_article(f"{framing}{thing}") if framing else thing
    return f'{body[0].upper()}{body[1:]} {setting} that says "{text}"'


def normalise(text: str) -> str:
    """What the OCR reward compares: lower case, spaces removed."""
    return text.replace(" ", "").lower()


def draw_split(rng: random.Random, pools: dict[str, list[str]], size: int, used: set[str]) -> list[str]:
    """`size` prompts whose targets (normalised) are not in `used`; adds them to `used`."""
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    prompts: list[str] = []
    while len(prompts) < size:
        kind = rng.choices(kinds, weights)[0]
        pool = pools[kind]
        while pool and normalise(pool[-1]) in used:
            pool.pop()
        if not pool:
            raise RuntimeError(f"ran out of {kind!r} targets; add words or lower KIND_WEIGHTS[{kind!r}]")
        text = pool.pop()
        used.add(normalise(text))
        prompts.append(make_prompt(rng, text, kind))
    return prompts


def quoted(prompt: str) -> str:
    parts = prompt.split('"')
    assert len(parts) == 3 and parts[2] == "", f"prompt must end with one quoted target: {prompt!r}"
    return parts[1]


def build() -> tuple[list[str], list[str]]:
    """(train prompts, test prompts); a pure function of SEED and the lists above."""
    rng = random.Random(SEED)
    pools = target_pools(rng)
    used: set[str] = set()
    test = draw_split(rng, pools, TEST_SIZE, used)
    train = draw_split(rng, pools, TRAIN_SIZE, used)
    test_targets = {normalise(quoted(prompt)) for prompt in test}
    train_targets = {normalise(quoted(prompt)) for prompt in train}
    assert len(test_targets) == TEST_SIZE and len(train_targets) == TRAIN_SIZE, "targets repeat within a split"
    assert not test_targets & train_targets, "train and test targets overlap"
    assert all("\n" not in prompt and prompt.isascii() for prompt in train + test)
    return train, test


def render(prompts: list[str]) -> str:
    return "".join(prompt + "\n" for prompt in prompts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the committed files with a fresh build")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: next to this script)")
    args = parser.parse_args(argv)
    train, test = build()
    outputs = {args.out / "train.txt": render(train), args.out / "test.txt": render(test)}
    return write_or_check(outputs, args.check, Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
