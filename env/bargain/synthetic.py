"""A generated training catalog: products the model cannot memorise, so it must read its prompt.

The builtin catalog has 364 products from a few brand and item tables, list prices $5 to $3,500 on
shelf endings (.99); a model trained only on it copies those names and price shapes and breaks on
other listings (issue 18: on Amazon products or second-hand listings the trained buyer named a
catalog product instead of the one in its prompt, and its first offer overshot the budget). This
source draws every part afresh from a seed:

* titles from invented brand names (random syllables), model codes, one of many item nouns and
  optional trailing descriptors, short or long like real listings;
* list prices log-uniform over four orders of magnitude ($3 to $60,000) with mixed endings
  (.99, .00, .50, any cents);
* seller costs anywhere from 10% to 110% of the list price, so the cost lies below the buyer's
  budget in most products and above it in some (conflicting interest), like the benchmark's.

It is a *training* source (``--scenarios builtin+synthetic``): its own test split exists but no
evaluation reads it, and it shares no product with builtin or Amazon, so every evaluation on those
stays held out.
"""

from __future__ import annotations

import random
from functools import lru_cache

from env.bargain.scenario import Scenario, make_scenario

SYNTHETIC_SEED = 20261123
SYNTHETIC_PRODUCTS = 3000

_ONSETS = ["b", "br", "c", "cr", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "kl", "l", "m", "n", "p", "pl",
           "qu", "r", "s", "sk", "st", "t", "tr", "v", "w", "z", "zh", ""]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"]
_CODAS = ["", "", "n", "r", "x", "l", "s", "m", "th", "ck", "nd", "st"]

# category: item nouns. Broad on purpose (goods, vehicles, rentals, services), none from the
# builtin tables' exact titles.
ITEMS: dict[str, list[str]] = {
    "electronics": ["Portable Projector", "Noise Cancelling Headset", "Action Camera", "Car Dash Cam", "Drone with Camera",
                    "Tablet", "Smartphone", "Laptop", "Gaming Console", "Home Theater System", "Digital Piano",
                    "Satellite Radio", "Security Camera Kit", "Graphics Card", "Server Rack"],
    "home": ["Sofa", "Dining Table", "Queen Mattress", "Bookshelf", "Office Chair", "Standing Desk", "Area Rug",
             "Dishwasher", "Refrigerator", "Washing Machine", "Pendant Lamp", "Wardrobe", "Bunk Bed", "Hot Tub"],
    "vehicles": ["Used Hatchback", "Pickup Truck", "Electric Scooter", "Mountain Bike", "Motorcycle", "Camper Van",
                 "Cargo Trailer", "Sailboat", "Golf Cart", "Riding Lawn Mower", "Snowmobile", "E-Bike"],
    "tools": ["Table Saw", "Welder", "Air Compressor", "Generator", "Tile Cutter", "Chainsaw", "Tool Set",
              "Ladder", "Drill Press", "Log Splitter"],
    "fashion": ["Leather Jacket", "Running Shoes", "Wrist Watch", "Handbag", "Sunglasses", "Wool Coat",
                "Wedding Dress", "Hiking Boots", "Silver Necklace", "Backpack"],
    "hobbies": ["Acoustic Guitar", "Drum Kit", "Telescope", "Sewing Machine", "3D Printer", "Board Game Collection",
                "Trading Card Lot", "Aquarium Setup", "Model Train Set", "Vintage Camera", "Violin"],
    "everyday": ["Phone Case", "Coffee Mug Set", "Water Bottle", "Desk Lamp", "Shower Head", "Bath Towels",
                 "Phone Charger", "Notebook Pack", "Kitchen Scale", "Pet Bed", "Ice Scraper", "Umbrella"],
    "property-services": ["Studio Apartment Lease", "Parking Space", "Storage Unit", "Moving Service",
                          "House Painting Job", "Wedding Photography", "Piano Lessons", "Car Repair Job",
                          "Roof Repair", "Web Design Project"],
}
_CONDITIONS = ["", "", "", "New", "Used", "Like New", "Refurbished", "Open Box", "Vintage"]
_DESCRIPTORS = ["for Home and Office", "with Carrying Case", "Black", "White", "Large", "Compact", "2-Pack",
                "with Warranty", "Heavy Duty", "Low Mileage", "Barely Used", "Great Condition", "Needs Minor Repair",
                "Pickup Only", "Free Delivery", "Includes Accessories", "Original Box", "Limited Edition"]
_FEATURES = ["well kept", "one owner", "receipts included", "smoke-free home", "works perfectly", "minor scratches",
             "recently serviced", "all original parts", "energy efficient", "easy to assemble", "lightweight",
             "water resistant", "rechargeable battery", "solid wood", "stainless steel", "under warranty",
             "cash or transfer", "can deliver locally", "firm on quality", "spare parts included"]


def _word(rng: random.Random) -> str:
    syllables = rng.choice([1, 2, 2, 3])
    text = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CODAS)
    return text.capitalize()


def _model_code(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return ""
    if kind < 0.6:
        return f"{rng.choice('ABCDEFGHKLMNPRSTVXZ')}{rng.randint(1, 999)}"
    if kind < 0.8:
        return f"{rng.randint(100, 999)}-{rng.randint(10, 999)}"
    return f"{rng.randint(1995, 2026)}"


def _price(rng: random.Random) -> float:
    price = 3 * (60000 / 3) ** rng.random()
    ending = rng.random()
    if price >= 1000 and ending < 0.5:
        return float(round(price, -2 if price >= 10000 else -1))
    if ending < 0.4:
        return max(round(price) - 0.01, 2.99)
    if ending < 0.6:
        return float(max(round(price), 3))
    if ending < 0.7:
        return max(round(price) - 0.5, 2.5)
    return round(price, 2)


@lru_cache(maxsize=4)
def _catalog(n: int, seed: int) -> tuple[Scenario, ...]:
    rng = random.Random(seed)
    scenarios: list[Scenario] = []
    ids: set[str] = set()
    categories = list(ITEMS)
    while len(scenarios) < n:
        category = rng.choice(categories)
        item = rng.choice(ITEMS[category])
        parts = [rng.choice(_CONDITIONS), _word(rng), _model_code(rng), item]
        if rng.random() < 0.4:
            parts.append("- " + ", ".join(rng.sample(_DESCRIPTORS, rng.randint(1, 3))))
        title = " ".join(p for p in parts if p)
        features = rng.sample(_FEATURES, rng.randint(1, 4))
        description = f"{title.split(' - ')[0]}: " + ", ".join(features) + "."
        list_price = _price(rng)
        cost = round(list_price * rng.uniform(0.1, 1.1), 2)
        scenario = make_scenario(title, description, category, list_price, max(cost, 0.01), "synthetic")
        if scenario.id in ids:
            continue
        ids.add(scenario.id)
        scenarios.append(scenario)
    return tuple(scenarios)


def synthetic_catalog(n: int = SYNTHETIC_PRODUCTS, seed: int = SYNTHETIC_SEED) -> list[Scenario]:
    """``n`` generated scenarios (deterministic in ``seed``; a fresh list)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return list(_catalog(n, seed))
