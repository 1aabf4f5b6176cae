"""The built-in product catalog: the offline default scenario set, written for this project.

Products are generated deterministically from the small tables below (brands, items with a
realistic US retail price range, descriptive features), so the catalog needs no download.
Seller costs follow the shape of the AmazonHistoryPrice benchmark (historical low at a
median of about half the list price, a few products whose low is above the buyer's budget),
which gives both mutual-interest and conflicting-interest scenarios.
"""

from __future__ import annotations

import random
from functools import lru_cache

from env.bargain.scenario import Scenario, make_scenario

CATALOG_SEED = 20240215
PRODUCTS_PER_CATEGORY = 28

# category: (brands, [(item, low $, high $)], [features])
TABLES: dict[str, tuple[list[str], list[tuple[str, float, float]], list[str]]] = {
    "electronics": (
        ["Voltra", "Sonique", "Pixelon", "Auralis", "Nexbyte", "Kestrel"],
        [("Wireless Earbuds", 29, 249), ("Bluetooth Speaker", 25, 399), ("4K Smart TV 55-inch", 349, 1499),
         ("Noise-Cancelling Headphones", 79, 449), ("Portable Power Bank 20000mAh", 19, 89),
         ("Mirrorless Camera Body", 549, 2499), ("Smartwatch", 99, 499), ("E-Reader 7-inch", 89, 279),
         ("Soundbar with Subwoofer", 129, 899), ("USB-C Docking Station", 49, 299)],
        ["long battery life", "fast charging", "Bluetooth 5.3", "water resistant (IPX5)", "two-year warranty",
         "companion app with EQ", "voice assistant built in", "aluminium housing", "low-latency mode"],
    ),
    "computers": (
        ["Arcwell", "Corebridge", "Lumatek", "Northpeak", "Quantix"],
        [("14-inch Ultrabook Laptop", 649, 1899), ("Gaming Laptop RTX", 999, 2999), ("27-inch QHD Monitor", 179, 599),
         ("Mechanical Keyboard", 49, 229), ("Wireless Mouse", 15, 129), ("1TB NVMe SSD", 49, 179),
         ("Mesh Wi-Fi Router System", 99, 449), ("Mini Desktop PC", 299, 999), ("Tablet 11-inch", 229, 1099)],
        ["16 GB RAM", "1 TB storage", "backlit keys", "Thunderbolt 4", "Wi-Fi 6E", "2560x1440 IPS panel",
         "hot-swappable switches", "fanless design", "three-year support"],
    ),
    "home-kitchen": (
        ["Hearthly", "Copperline", "Brewmaster", "Kitchara", "Oakhaven"],
        [("Stand Mixer 5-Quart", 149, 499), ("Espresso Machine", 199, 899), ("Air Fryer 6-Quart", 59, 199),
         ("Robot Vacuum", 149, 799), ("Cast Iron Dutch Oven", 39, 349), ("Chef's Knife Set", 49, 399),
         ("Blender High-Speed", 69, 549), ("Cordless Stick Vacuum", 99, 699), ("Drip Coffee Maker", 29, 199)],
        ["dishwasher-safe parts", "stainless steel", "10 speed settings", "enamelled finish", "self-emptying base",
         "programmable timer", "BPA-free", "limited lifetime warranty", "compact footprint"],
    ),
    "tools-home-improvement": (
        ["Ironclad", "Torqmax", "Buildwright", "Forgeline", "Stanridge"],
        [("Cordless Drill/Driver Kit", 59, 299), ("Circular Saw 7-1/4-inch", 69, 249), ("Socket Wrench Set 120-Piece", 39, 229),
         ("Smart Thermostat", 99, 279), ("Wet/Dry Shop Vacuum", 59, 229), ("Laser Level", 29, 399),
         ("Impact Driver", 79, 279), ("Rolling Tool Chest", 149, 899), ("Smart Video Doorbell", 59, 249)],
        ["brushless motor", "two 20V batteries", "LED work light", "chrome vanadium steel", "magnetic base",
         "self-levelling", "carrying case", "energy-saving schedules", "5-year warranty"],
    ),
    "sports-outdoors": (
        ["Summitline", "Trailforge", "Aquapeak", "Stridewell", "Boreal"],
        [("Carbon Road Bike", 899, 3499), ("2-Person Backpacking Tent", 99, 499), ("Adjustable Dumbbell Set", 149, 429),
         ("Inflatable Paddle Board", 199, 699), ("GPS Running Watch", 149, 599), ("Down Sleeping Bag", 89, 449),
         ("Folding Treadmill", 299, 1299), ("Trekking Poles Pair", 29, 179), ("Kayak 10-foot", 299, 999)],
        ["ultralight", "weatherproof", "includes pump and paddle", "quick-change weights", "heart-rate sensor",
         "rated to 20°F", "foldable for storage", "aluminium frame", "UV-resistant fabric"],
    ),
    "toys-games": (
        ["Playvana", "Brickstar", "Wonderloom", "Tinkerton", "Jollibox"],
        [("Building Brick Castle Set", 39, 399), ("Remote Control Car", 29, 199), ("Strategy Board Game", 24, 89),
         ("Dollhouse with Furniture", 69, 299), ("Kids' Ride-On Tractor", 149, 449), ("Coding Robot Kit", 59, 249),
         ("1000-Piece Jigsaw Puzzle", 14, 39), ("Plush Bear 24-inch", 19, 79), ("Train Set with Tracks", 39, 229)],
        ["ages 8+", "2-6 players", "rechargeable battery", "over 1,500 pieces", "STEM learning",
         "non-toxic materials", "app controlled", "gift box", "expansion compatible"],
    ),
    "beauty": (
        ["Lumiere", "Velvetine", "Purelle", "Glowhaus", "Serenne"],
        [("Ionic Hair Dryer", 39, 429), ("Skincare Serum Set", 29, 189), ("Electric Toothbrush", 29, 279),
         ("Perfume Eau de Parfum 100ml", 49, 189), ("Hair Straightener", 29, 199), ("LED Face Mask", 89, 449),
         ("Makeup Brush Set", 14, 99), ("Beard Trimmer", 24, 149)],
        ["vitamin C and hyaluronic acid", "cruelty-free", "three heat settings", "travel case", "pressure sensor",
         "long-lasting scent", "ceramic plates", "USB rechargeable", "dermatologist tested"],
    ),
    "books": (
        ["Harbor Press", "Meridian Books", "Northlight", "Quillstone", "Bluefield"],
        [("Hardcover Novel", 14, 36), ("Illustrated Cookbook", 19, 49), ("Collector's Box Set", 49, 249),
         ("Programming Textbook", 39, 129), ("Children's Picture Book", 8, 24), ("Art Monograph", 35, 150),
         ("Graphic Novel Omnibus", 29, 99), ("Atlas of the World", 29, 149)],
        ["first edition", "signed by the author", "over 600 pages", "full-colour photographs", "slipcase",
         "bestseller", "revised and updated", "foil-stamped cover", "reading ribbon"],
    ),
    "automotive": (
        ["Roadrunner", "Gearworks", "Autovance", "Pistonry", "Drivesafe"],
        [("Dash Cam Front and Rear", 59, 299), ("Portable Jump Starter", 59, 249), ("Car Cover All-Weather", 39, 159),
         ("Tire Inflator Cordless", 29, 129), ("Car Seat Covers Set", 39, 199), ("OBD2 Diagnostic Scanner", 19, 399),
         ("Roof Cargo Box", 249, 899), ("Floor Mats Custom Fit", 49, 229)],
        ["4K recording", "2000A peak", "waterproof", "auto shut-off", "universal fit", "Bluetooth app",
         "18 cubic feet", "laser measured", "night vision"],
    ),
    "pet-supplies": (
        ["Pawsome", "Furlander", "Whiskerly", "Tailwind", "Barkley"],
        [("Orthopedic Dog Bed", 39, 199), ("Automatic Cat Feeder", 49, 179), ("GPS Pet Tracker", 39, 149),
         ("Cat Tree Tower", 49, 249), ("Dog Stroller", 79, 299), ("Self-Cleaning Litter Box", 199, 699),
         ("Aquarium Kit 20-Gallon", 79, 299), ("Pet Hair Grooming Kit", 29, 149)],
        ["memory foam", "washable cover", "portion control", "real-time tracking", "sisal posts",
         "quiet motor", "LED lighting", "odour control", "vet recommended"],
    ),
    "music": (
        ["Resonar", "Tempova", "Chordwell", "Sonata", "Brightstring"],
        [("Acoustic Guitar", 129, 1299), ("Digital Piano 88-Key", 399, 1999), ("Studio Headphones", 69, 349),
         ("USB Audio Interface", 79, 449), ("Electric Guitar", 199, 1599), ("Vinyl Turntable", 99, 599),
         ("Condenser Microphone", 49, 399), ("Ukulele Concert", 39, 249)],
        ["solid spruce top", "weighted hammer action", "closed-back", "24-bit/192 kHz", "humbucker pickups",
         "belt drive", "cardioid pattern", "gig bag included", "built-in preamp"],
    ),
    "video-games": (
        ["Pixelforge", "Questline", "Arcadia", "Nexplay", "Starcade"],
        [("Game Console 1TB", 299, 599), ("Wireless Controller", 49, 199), ("Gaming Headset", 39, 299),
         ("Racing Wheel and Pedals", 199, 899), ("Handheld Gaming PC", 399, 799), ("VR Headset", 299, 999),
         ("Collector's Edition Game", 69, 249), ("Gaming Chair", 149, 599)],
        ["120 Hz output", "hall-effect sticks", "7.1 surround", "force feedback", "OLED screen",
         "inside-out tracking", "art book and figurine", "lumbar support", "two-year warranty"],
    ),
    "patio-lawn-garden": (
        ["Greenhaven", "Yardcraft", "Bloomfield", "Terrano", "Sunward"],
        [("Gas Grill 3-Burner", 249, 999), ("Robotic Lawn Mower", 599, 2499), ("Cordless Leaf Blower", 79, 299),
         ("Patio Dining Set 5-Piece", 299, 1499), ("Pressure Washer", 149, 599), ("Raised Garden Bed Kit", 49, 249),
         ("Hammock with Stand", 69, 249), ("Pellet Smoker", 399, 1299)],
        ["stainless burners", "rain sensor", "brushless motor", "weather-resistant wicker", "2000 PSI",
         "galvanised steel", "holds 450 lb", "Wi-Fi temperature control", "easy assembly"],
    ),
}


def _retail(rng: random.Random, low: float, high: float) -> float:
    """A list price between ``low`` and ``high``, skewed low, ending in .99 like shelf prices."""
    price = low * (high / low) ** rng.random()
    return max(round(price) - 0.01, 4.99)


def _description(rng: random.Random, brand: str, item: str, features: list[str]) -> str:
    picks = rng.sample(features, 3)
    return f"The {brand} {item}: {picks[0]}, {picks[1]} and {picks[2]}."


@lru_cache(maxsize=1)
def _catalog() -> tuple[Scenario, ...]:
    rng = random.Random(CATALOG_SEED)
    scenarios: list[Scenario] = []
    for category, (brands, items, features) in TABLES.items():
        titles: set[str] = set()
        while len(titles) < PRODUCTS_PER_CATEGORY:
            brand = rng.choice(brands)
            item, low, high = rng.choice(items)
            model = rng.choice(["", " Pro", " Plus", " Lite", " Max", " 2", " X", " Elite", " Mini", " SE"])
            title = f"{brand} {item}{model}"
            if title in titles:
                continue
            titles.add(title)
            list_price = _retail(rng, low, high)
            # Historical low / list price: median ~0.5; about one product in twenty was never
            # discounted below the buyer's 0.8 budget factor (conflicting interest).
            if rng.random() < 0.05:
                cost_ratio = rng.uniform(0.8, 0.97)
            else:
                cost_ratio = 0.1 + 0.75 * rng.betavariate(3.0, 3.0)
            scenarios.append(make_scenario(title, _description(rng, brand, item, features), category,
                                           list_price, round(list_price * cost_ratio, 2), "builtin"))
    return tuple(scenarios)


def builtin_catalog() -> list[Scenario]:
    """All built-in scenarios (a fresh list; the scenarios themselves are immutable)."""
    return list(_catalog())
