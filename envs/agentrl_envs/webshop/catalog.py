"""WebShop product catalog and instructions: generation, loading, search and the paper's reward.

Data files use WebShop's own schema (Yao et al. 2022, ``web_agent_site``: ``items_shuffle.json``,
``items_ins_v2.json``, optionally ``items_human_ins.json``). No registry ships WebShop's scraped
data, so ``generate_catalog`` builds a catalog in that schema from ``vocab.json`` (5 categories,
40 product types, 4,000 products) deterministically from a seed and caches it under
``~/.cache/agentrl/webshop``; the real files (``data_dir`` or ``$WEBSHOP_DATA``) go through the
same ``load_catalog``. Goals follow WebShop's synthetic-goal construction (instruction + a price
bound). The schema and the price rule: docs/environments.md, "WebShop".
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

CATALOG_VERSION = "v1"
VOCAB_PATH = Path(__file__).with_name("vocab.json")
PRODUCTS_PER_TYPE = 100
SEARCH_RETURN_N = 50  # WebShop's engine returns the top 50 search hits
PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # WebShop's price_upper candidates
GOAL_SHUFFLE_SEED = 233  # WebShop shuffles its goals with random.seed(233)
N_VALID = 500  # WebShop evaluates on the first 500 shuffled goals


@dataclass
class Product:
    """One product in the engine's view (WebShop's load_products)."""

    asin: str
    name: str
    category: str
    query: str
    product_category: str
    description: str
    features: list[str]
    reviews: list[dict]
    rating: str
    price: float
    options: dict[str, list[str]]
    attributes: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Lower-cased text the attribute matcher and the search index read."""
        return " ".join([self.name, self.description, " ".join(self.features)]).lower()


@dataclass
class Goal:
    """One instruction: the target product and what the reward checks (Y_att, Y_opt, price)."""

    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction: str
    attributes: list[str]
    options: list[str]
    price_upper: float


def default_cache_dir() -> Path:
    return Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl")) / "webshop"


# --- generation ---------------------------------------------------------------------------------
def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


_TEMPLATES = (
    "i need {art} {attrs} {type}",
    "i am looking for {art_t} {type} that is {attrs}",
    "find me {art} {attrs} {type}",
    "i want to buy {art_t} {type} which is {attrs}",
    "i'm looking for {art} {attrs} {type}",
)


def generate_catalog(seed: int = 0) -> tuple[list[dict], dict[str, dict]]:
    """Products (items_shuffle schema) and instructions (items_ins_v2 schema) from ``seed``."""
    vocab = json.loads(VOCAB_PATH.read_text())
    pools = vocab["option_pools"]
    rng = random.Random(seed)
    items, ins, seen = [], {}, set()
    for cat in sorted(vocab["categories"]):
        c = vocab["categories"][cat]
        for t in c["types"]:
            for _ in range(PRODUCTS_PER_TYPE):
                asin = "B0" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(8))
                while asin in seen:
                    asin = "B0" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(8))
                seen.add(asin)
                brand = rng.choice(c["brands"])
                attrs = rng.sample(t["attributes"], rng.randint(2, 4))
                in_name = attrs[: rng.randint(1, 2)]
                name = f"{brand} {' '.join(a.title() for a in in_name)} {t['type'].title()}"
                if rng.random() < 0.5:
                    name += f" - {attrs[-1].title()}"
                options = {}
                for otype, pool in t["options"].items():
                    vals = pools[pool]
                    k = rng.randint(3, min(6, len(vals)))
                    picked = set(rng.sample(vals, k))
                    options[otype] = [v for v in vals if v in picked]
                lo, hi = t["price"]
                price = round(rng.uniform(lo, hi), 2)
                features = [f"{a.capitalize()}: this {t['type']} is {a}." for a in attrs]
                features.append(f"Backed by {brand}'s 30-day satisfaction guarantee.")
                description = (f"The {brand} {t['type']} is designed for everyday use. "
                               f"It is {_join(attrs)}. Available in {len(next(iter(options.values())))} "
                               f"{next(iter(options))} choices.")
                scores = [rng.randint(3, 5) for _ in range(rng.randint(1, 3))]
                reviews = [{"score": s, "title": ["Okay", "Good value", "Love it"][s - 3],
                            "body": f"{['It does the job', 'Works as described', 'Great'][s - 3]} "
                                    f"{t['type']}, {rng.choice(attrs)} as promised."} for s in scores]
                items.append({
                    "asin": asin, "name": name, "category": cat, "query": t["query"],
                    "product_category": " \u203a ".join([c["root"]] + t["path"]),
                    "full_description": description, "small_description": features,
                    "pricing": f"${price:.2f}",
                    "average_rating": f"{sum(scores) / len(scores):.1f}",
                    "customization_options": {k: [{"value": v} for v in vs] for k, vs in options.items()},
                    "reviews": reviews, "brand": brand,
                })
                want = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
                want_opts = {k: rng.choice(vs) for k, vs in options.items()}
                text = rng.choice(_TEMPLATES).format(
                    art=_article(want[0]), art_t=_article(t["type"]), attrs=_join(want), type=t["type"])
                text += "".join(f"{', with' if i == 0 else ', and'} {k}: {v}"
                                for i, (k, v) in enumerate(want_opts.items()))
                ins[asin] = {"attributes": attrs, "instruction": text,
                             "instruction_attributes": want, "instruction_options": want_opts}
    order = list(range(len(items)))
    rng.shuffle(order)  # items_shuffle.json is shuffled
    return [items[i] for i in order], ins


def _atomic_write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)  # concurrent writers: last complete file wins, never a partial one


def ensure_generated(seed: int = 0, cache_dir: str | Path | None = None) -> Path:
    """Generate the catalog for ``seed`` once and return its directory (cached on disk)."""
    d = Path(cache_dir or default_cache_dir()) / f"generated-{CATALOG_VERSION}-seed{seed}"
    if not ((d / "items_shuffle.json").exists() and (d / "items_ins_v2.json").exists()):
        items, ins = generate_catalog(seed)
        _atomic_write(d / "items_ins_v2.json", ins)
        _atomic_write(d / "items_shuffle.json", items)
    return d


# --- loading ------------------------------------------------------------------------------------
def _first_existing(d: Path, names: tuple[str, ...]) -> Path | None:
    for n in names:
        if (d / n).exists():
            return d / n
    return None


def _parse_price(pricing: Any, rng: random.Random) -> float:
    """WebShop's rule: no price -> 100; "$a - $b" -> uniform in [a, b]; "$a" -> a."""
    if not pricing:
        return 100.0
    if isinstance(pricing, (int, float)):
        return float(pricing)
    nums = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", str(pricing).replace(",", ""))]
    if not nums:
        return 100.0
    return round(rng.uniform(nums[0], nums[1]), 2) if len(nums) > 1 else nums[0]


def _options(raw: Any) -> dict[str, list[str]]:
    out = {}
    for k, vals in (raw or {}).items():
        vs = [(v.get("value") if isinstance(v, dict) else v) for v in vals]
        vs = [str(v).strip().lower() for v in vs if v]
        if vs:
            out[str(k).strip().lower()] = list(dict.fromkeys(vs))
    return out


def _goal_options(raw: Any) -> list[str]:
    if isinstance(raw, dict):
        return [str(v).strip().lower() for v in raw.values() if v]
    return [str(v).strip().lower() for v in (raw or []) if v]


class Catalog:
    """Products, goals and a bm25s index over them."""

    def __init__(self, products: dict[str, Product], goals: list[Goal], source: str):
        self.products = products
        self.goals = goals
        self.source = source
        self.asins = list(products)
        self.families = sorted({g.category for g in goals})
        order = list(range(len(goals)))
        random.Random(GOAL_SHUFFLE_SEED).shuffle(order)
        n_valid = min(N_VALID, max(1, len(goals) // 5))  # small (1000-item) files: a fifth
        self.split = {"valid": [goals[i] for i in order[:n_valid]],
                      "train": [goals[i] for i in order[n_valid:]]}
        self._retriever = None

    def _index(self):
        import bm25s
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        corpus = [f"{p.name} {p.query} {' '.join(p.features)} {' '.join(sum(p.options.values(), []))}"
                  for p in (self.products[a] for a in self.asins)]
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False,
                                return_ids=False)
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)
        self._vocab = set(self._retriever.vocab_dict)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the top-``k`` BM25 hits (bm25s, Lucene scoring), best first."""
        if self._retriever is None:
            self._index()
        import bm25s

        q = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, show_progress=False,
                           return_ids=False)[0]
        q = [t for t in q if t in self._vocab]
        if not q:
            return []
        k = min(k, len(self.asins))
        ids, scores = self._retriever.retrieve([q], k=k, show_progress=False, n_threads=1)
        return [self.asins[i] for i, s in zip(ids[0], scores[0], strict=True) if s > 0]


def load_catalog(data_dir: str | Path, human_goals: bool = False, seed: int = 0) -> Catalog:
    """Read WebShop-format files from ``data_dir`` (schema: docs/environments.md, "WebShop")."""
    d = Path(data_dir)
    items_path = _first_existing(d, ("items_shuffle.json", "items_shuffle_1000.json"))
    ins_path = _first_existing(d, ("items_ins_v2.json", "items_ins_v2_1000.json"))
    if items_path is None or ins_path is None:
        raise FileNotFoundError(f"{d} must contain items_shuffle[_1000].json and items_ins_v2[_1000].json")
    rng = random.Random(seed)
    items = json.loads(items_path.read_text())
    ins = json.loads(ins_path.read_text())
    products: dict[str, Product] = {}
    for it in items:
        asin = it.get("asin")
        if not asin or asin in products:
            continue
        feats = it.get("small_description") or []
        if isinstance(feats, str):
            feats = [feats]
        reviews = it.get("reviews") or it.get("Reviews") or []
        products[asin] = Product(
            asin=asin, name=str(it.get("name") or it.get("Title") or ""),
            category=str(it.get("category") or ""), query=str(it.get("query") or "").lower(),
            product_category=str(it.get("product_category") or ""),
            description=str(it.get("full_description") or ""),
            features=[str(f) for f in feats], reviews=[r for r in reviews if isinstance(r, dict)],
            rating=str(it.get("average_rating") or "N.A."),
            price=_parse_price(it.get("pricing"), rng),
            options=_options(it.get("customization_options")),
            attributes=list((ins.get(asin) or {}).get("attributes") or []))
    goals: list[Goal] = []
    if human_goals:
        hpath = d / "items_human_ins.json"
        if not hpath.exists():
            raise FileNotFoundError(f"human_goals=True needs {hpath}")
        raw = [(a, g) for a, gs in json.loads(hpath.read_text()).items() for g in gs]
    else:
        raw = [(a, g) for a, g in ins.items()]
    for asin, g in raw:
        p = products.get(asin)
        if p is None or not g.get("instruction"):
            continue
        # WebShop's synthetic price limit: two of the next four multiples of 10, keep the larger
        above = [x for x in PRICE_RANGE if x > p.price][:4]
        if len(above) >= 2:
            upper = max(rng.sample(above, 2))
            text = f"{g['instruction']}, and price lower than {upper:.2f} dollars"
        else:
            upper, text = 1_000_000.0, g["instruction"]
        goals.append(Goal(asin=asin, category=p.category, query=p.query, name=p.name,
                          product_category=p.product_category, instruction=text,
                          attributes=[str(a).lower() for a in g.get("instruction_attributes") or []],
                          options=_goal_options(g.get("instruction_options")), price_upper=upper))
    return Catalog(products, goals, str(d))


def get_catalog(data_dir: str | None = None, human_goals: bool = False, seed: int = 0) -> Catalog:
    """The catalog of ``data_dir`` (else ``$WEBSHOP_DATA``, else the generated one), loaded once
    per process and shared, with its search index, by every env that asks for the same files
    (read-only: envs keep their page state to themselves)."""
    data_dir = data_dir or os.environ.get("WEBSHOP_DATA") or None
    if data_dir is None:
        data_dir = str(ensure_generated(seed))
    return _load_shared(os.path.realpath(data_dir), bool(human_goals), int(seed))


@lru_cache(maxsize=4)
def _load_shared(data_dir: str, human_goals: bool, seed: int) -> Catalog:
    # keyed by the resolved directory: get_catalog() and get_catalog(None, False, 0) share one
    return load_catalog(data_dir, human_goals=human_goals, seed=seed)


# --- reward (WebShop paper, Sec. 3.1) -----------------------------------------------------------
_STOP = {"a", "an", "the", "and", "or", "for", "with", "of", "in", "to", "by", "-", "&"}


def _tokens(s: str) -> set[str]:
    # \w is Unicode-aware: non-ASCII titles ("连衣裙 — 真丝", "café") keep their words
    return {t for t in re.findall(r"\w+", s.lower()) if t not in _STOP}


def type_reward(bought: Product, goal: Goal) -> float:
    """r_type in {0, 0.1, 0.5, 1}: text matching of the product type (query, category, title).

    title_score is the share of the goal title's words in the bought title (WebShop uses spaCy
    nouns; we use plain content words). A goal title without words scores 0.2, as in WebShop's
    ``get_type_reward``: neither a match nor a mismatch, so query/category decide.
    """
    query_match = bought.query == goal.query
    cats_b = {x.strip() for x in bought.product_category.split("\u203a")}
    cats_g = {x.strip() for x in goal.product_category.split("\u203a")}
    category_match = len(cats_b & cats_g) >= 2
    gt = _tokens(goal.name)
    title_score = len(gt & _tokens(bought.name)) / len(gt) if gt else 0.2
    r = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r = 0.5
    if title_score < 0.1:
        r = 0.1
    if title_score == 0.0:
        r = 0.0
    return r


def attribute_match(attr: str, bought: Product) -> bool:
    """Y_att hit: the attribute is one of the product's attributes or appears in its text."""
    a = attr.lower().strip()
    return a in {x.lower() for x in bought.attributes} or a in bought.text


def option_match(goal_opt: str, chosen: list[str]) -> bool:
    """Y_opt hit: a chosen option equals the goal option (or one contains the other)."""
    g = goal_opt.lower().strip()
    return any(g == c or (len(c) > 2 and (g in c or c in g)) for c in chosen)


def reward(bought: Product, chosen_options: dict[str, str], goal: Goal) -> float:
    """r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price])
    / (|U_att| + |U_opt| + 1)  (WebShop paper, Sec. 3.1)."""
    chosen = [v.lower() for v in chosen_options.values()]
    att = sum(attribute_match(a, bought) for a in goal.attributes)
    opt = sum(option_match(o, chosen) for o in goal.options)
    price = 1.0 if bought.price <= goal.price_upper else 0.0
    total = len(goal.attributes) + len(goal.options) + 1
    return type_reward(bought, goal) * (att + opt + price) / total

