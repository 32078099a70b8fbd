"""Question answering tasks: QA metrics, a generated multi-hop knowledge base, and dataset loaders.

* Metrics (``normalize_answer``, ``token_f1``, ``exact_match``): the SQuAD/HotpotQA convention; a
  gold answer with aliases scores the best alias.
* ``generate_kb``: a seeded world of made-up entities, one document each, with 2-3 hop chain
  questions and comparison questions that need one search per hop and that no earlier hop's
  search gives away; train / valid by a seeded shuffle (a fifth valid).
* ``load_qa_dataset``: HotpotQA, 2WikiMultihopQA, MuSiQue and Bamboogle from the hub or local
  files, in the schemas of the hub, the original releases and FlashRAG (detected per row);
  ``corpus_from_examples`` turns their context paragraphs into a search corpus.

Details: docs/environments.md, "Math and QA tasks".
"""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ============================================================================ metrics
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation and articles, collapse whitespace."""
    s = "".join(ch for ch in str(s).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _f1(pred: str, gold: str) -> float:
    p, g = normalize_answer(pred), normalize_answer(gold)
    # yes/no/noanswer must match exactly (HotpotQA's rule): no partial credit for them
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = sum((Counter(pt) & Counter(gt)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pt), common / len(gt)
    return 2 * precision * recall / (precision + recall)


def _golds(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else [str(g) for g in gold]


def token_f1(pred: str | None, gold: str | Iterable[str]) -> float:
    """Best token-F1 of ``pred`` against the gold answer(s); 0 for None."""
    if pred is None:
        return 0.0
    return max((_f1(pred, g) for g in _golds(gold)), default=0.0)


def exact_match(pred: str | None, gold: str | Iterable[str]) -> float:
    """1.0 if ``pred`` equals a gold answer after normalisation, else 0.0."""
    if pred is None:
        return 0.0
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _golds(gold)))


# ============================================================================ records
@dataclass(frozen=True)
class Document:
    """One searchable document."""

    title: str
    text: str


@dataclass(frozen=True)
class QAExample:
    """One question with its gold answers."""

    question: str
    answers: tuple[str, ...]
    """Gold answer first, then aliases."""
    source: str
    """``kb``, ``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle``."""
    id: str
    hops: tuple[str, ...] = ()
    """Generated KB: titles of the documents to search, in order. Empty for loaded datasets."""
    context: tuple[Document, ...] = field(default=(), compare=False)
    """Paragraphs shipped with the example (HotpotQA/2Wiki/MuSiQue), for ``corpus_from_examples``."""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


# ============================================================================ generated KB
_SYLLABLES = ("ka", "lo", "mir", "ven", "dra", "thu", "sel", "quo", "rin", "bax", "zel", "fen", "gor",
              "vi", "nal", "tre", "pum", "sko", "har", "lei", "dox", "mab", "ust", "yor", "cel", "bri",
              "wen", "tal", "orv", "jus", "pra", "kem")
_OCCUPATIONS = ("chemist", "sculptor", "pilot", "architect", "economist", "surgeon", "poet", "engineer")
_INDUSTRIES = {"Motors": "car maker", "Foods": "food", "Textiles": "textile", "Airways": "airline",
               "Labs": "research", "Freight": "shipping"}
VALID_FRACTION = 0.2


@dataclass
class KnowledgeBase:
    """Entities, one document per entity, and the questions with their split."""

    documents: list[Document]
    questions: list[QAExample]
    split: dict[str, list[QAExample]]
    seed: int


def _namer(rng: random.Random):
    used: set[str] = set()

    def name(parts: int) -> str:
        while True:
            n = "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()
            if n not in used and len(n) >= 4:
                used.add(n)
                return n
    return name


def _world(rng: random.Random, n_countries: int, n_cities: int, n_companies: int, n_people: int) -> dict:
    name = _namer(rng)
    countries = [{"name": name(3), "currency": name(2).lower()} for _ in range(n_countries)]
    cities = [{"name": name(3), "country": countries[i % n_countries]["name"], "river": name(2),
               "founded": rng.randint(900, 1800), "population": rng.randint(20, 900) * 1000}
              for i in range(n_cities)]
    for c in countries:
        c["capital"] = next(x["name"] for x in cities if x["country"] == c["name"])
    people = [{"name": f"{name(2)} {name(3)}", "born": rng.randint(1900, 1990),
               "birthplace": rng.choice(cities)["name"], "occupation": rng.choice(_OCCUPATIONS)}
              for _ in range(n_people)]
    suffixes = sorted(_INDUSTRIES)
    companies = []
    for i in range(n_companies):
        sfx = suffixes[i % len(suffixes)]
        companies.append({"name": f"{name(3)} {sfx}", "industry": _INDUSTRIES[sfx],
                          "founder": people[i]["name"],
                          "founded": rng.randint(1920, 2015), "hq": rng.choice(cities)["name"]})
    for p in people[n_companies:]:
        p["employer"] = rng.choice(companies)["name"]
    return {"countries": countries, "cities": cities, "people": people, "companies": companies}


def _documents(w: dict) -> list[Document]:
    docs = []
    for c in w["countries"]:
        docs.append(Document(c["name"], f"{c['name']} is a country. Its capital is {c['capital']} and its "
                                        f"currency is the {c['currency']}."))
    for c in w["cities"]:
        docs.append(Document(c["name"], f"{c['name']} is a city in {c['country']} on the {c['river']} river. "
                                        f"It was founded in {c['founded']} and has {c['population']} "
                                        "inhabitants."))
    for p in w["people"]:
        # a founder's own document does not name the company: "the founder of X" must be found in X's
        text = f"{p['name']} is a {p['occupation']} born in {p['born']} in {p['birthplace']}."
        if "employer" in p:
            text += f" {p['name']} works for {p['employer']}."
        docs.append(Document(p["name"], text))
    for c in w["companies"]:
        docs.append(Document(c["name"], f"{c['name']} is a {c['industry']} company founded in "
                                        f"{c['founded']} by {c['founder']}. Its headquarters are in "
                                        f"{c['hq']}."))
    return docs


def _templates(w: dict) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(kind, question, answer, hops) for every entity a template applies to."""
    city = {c["name"]: c for c in w["cities"]}
    country = {c["name"]: c for c in w["countries"]}
    person = {p["name"]: p for p in w["people"]}
    comp = {c["name"]: c for c in w["companies"]}
    out = []
    for c in w["companies"]:
        f = person[c["founder"]]
        bp = city[f["birthplace"]]
        out += [("founder_birthplace", f"In which city was the founder of {c['name']} born?", bp["name"],
                 (c["name"], f["name"])),
                ("founder_birth_year", f"In what year was the founder of {c['name']} born?", str(f["born"]),
                 (c["name"], f["name"])),
                ("hq_river", f"On which river lies the city where {c['name']} has its headquarters?",
                 city[c["hq"]]["river"], (c["name"], c["hq"])),
                ("founder_birth_country", f"In which country was the founder of {c['name']} born?",
                 bp["country"], (c["name"], f["name"], bp["name"]))]
    for p in w["people"]:
        bp = city[p["birthplace"]]
        out += [("birth_country", f"In which country was {p['name']} born?", bp["country"],
                 (p["name"], bp["name"])),
                ("birth_country_capital", f"What is the capital of the country where {p['name']} was born?",
                 country[bp["country"]]["capital"], (p["name"], bp["name"], bp["country"]))]
        if "employer" in p:
            e = comp[p["employer"]]
            out.append(("employer_hq", f"In which city does the company {p['name']} works for have its "
                                       "headquarters?", e["hq"], (p["name"], e["name"])))
    cs = w["companies"]
    for a, b in zip(cs[::2], cs[1::2], strict=False):
        if a["founded"] != b["founded"]:
            first = a if a["founded"] < b["founded"] else b
            out.append(("compare_founded", f"Which company was founded earlier, {a['name']} or {b['name']}?",
                        first["name"], (a["name"], b["name"])))
    return out


def generate_kb(seed: int = 0, n_countries: int = 8, n_cities: int = 24, n_companies: int = 30,
                n_people: int = 90) -> KnowledgeBase:
    """The generated knowledge base of ``seed`` (deterministic; docs/environments.md, "Math and QA tasks")."""
    if not (1 <= n_countries <= n_cities and 1 <= n_companies <= n_people):
        raise ValueError("generate_kb needs 1 <= n_countries <= n_cities and 1 <= n_companies <= n_people")
    rng = random.Random(seed)
    w = _world(rng, n_countries, n_cities, n_companies, n_people)
    docs = _documents(w)
    norm_docs = [(d.title, normalize_answer(f"{d.title} {d.text}")) for d in docs]
    questions = []
    for kind, q, ans, hops in _templates(w):
        norm = f" {normalize_answer(ans)} "
        # leak: the answer is in the question or in a document that names an earlier hop's entity
        # (a search for that entity may return it), other than the last hop's own document
        names = [f" {normalize_answer(h)} " for h in hops[:-1]]
        leak = kind != "compare_founded" and (norm in f" {normalize_answer(q)} " or any(
            t != hops[-1] and norm in f" {d} " and any(n in f" {d} " for n in names) for t, d in norm_docs))
        if not leak:
            questions.append(QAExample(q, (ans,), "kb", f"kb{seed}/{len(questions)}", hops,
                                       meta={"kind": kind}))
    order = list(range(len(questions)))
    random.Random(seed + 1).shuffle(order)
    n_valid = max(1, int(len(order) * VALID_FRACTION))
    split = {"valid": [questions[i] for i in sorted(order[:n_valid])],
             "train": [questions[i] for i in sorted(order[n_valid:])]}
    return KnowledgeBase(docs, questions, split, seed)


# ============================================================================ dataset loaders
DATASETS = {
    # name: (hub repo, config, {our split: hub split})
    "hotpotqa": ("hotpotqa/hotpot_qa", "distractor", {"train": "train", "valid": "validation"}),
    "2wiki": ("RUC-NLPIR/FlashRAG_datasets", "2wikimultihopqa", {"train": "train", "valid": "dev"}),
    "musique": ("RUC-NLPIR/FlashRAG_datasets", "musique", {"train": "train", "valid": "dev"}),
    "bamboogle": ("RUC-NLPIR/FlashRAG_datasets", "bamboogle", {"valid": "test", "test": "test"}),
}
"""Default hub sources (override with ``repo`` / ``config``); any schema of ``load_qa_dataset`` works."""


def _as_list(x: Any) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, list | tuple) else [x]


def _context(row: dict) -> tuple[Document, ...]:
    ctx = row.get("context")
    docs: list[Document] = []
    if isinstance(ctx, dict):  # HotpotQA on the hub: {"title": [...], "sentences": [[...], ...]}
        for t, sents in zip(ctx.get("title", []), ctx.get("sentences", []), strict=False):
            docs.append(Document(str(t), "".join(sents).strip()))
    elif isinstance(ctx, list):  # original HotpotQA / 2Wiki JSON: [[title, [sentences]], ...]
        for item in ctx:
            if isinstance(item, list | tuple) and len(item) == 2:
                docs.append(Document(str(item[0]), "".join(_as_list(item[1])).strip()))
    for p in row.get("paragraphs") or []:  # MuSiQue
        docs.append(Document(str(p.get("title", "")), str(p.get("paragraph_text", "")).strip()))
    return tuple(docs)


def example_from_row(row: dict, source: str, index: int = 0) -> QAExample:
    """One ``QAExample`` from a row in any supported schema (docs/environments.md, "Math and QA tasks")."""
    if "golden_answers" in row:  # FlashRAG
        answers = _as_list(row["golden_answers"])
    elif "Answer" in row:  # Bamboogle
        answers = _as_list(row["Answer"])
    else:  # HotpotQA, 2Wiki, MuSiQue
        answers = _as_list(row.get("answer")) + _as_list(row.get("answer_aliases"))
    question = row.get("question", row.get("Question"))
    if question is None or not answers:
        raise ValueError(f"{source} row {index}: no question/answer field in keys {sorted(row)}")
    ex_id = str(row.get("id", row.get("_id", f"{source}/{index}")))
    answers = tuple(dict.fromkeys(str(a).strip() for a in answers if str(a).strip()))
    meta = {k: row[k] for k in ("type", "level", "answerable") if k in row}
    return QAExample(str(question).strip(), answers, source, ex_id, context=_context(row), meta=meta)


def _read_local(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return data["data"] if isinstance(data, dict) and "data" in data else list(data)
    if path.suffix == ".parquet":
        import datasets

        return list(datasets.load_dataset("parquet", data_files=str(path), split="train"))
    raise ValueError(f"{path}: local QA files must be .json, .jsonl or .parquet")


def load_qa_dataset(name: str, split: str = "valid", path: str | Path | None = None, limit: int | None = None,
                    repo: str | None = None, config: str | None = None) -> list[QAExample]:
    """Examples of ``name`` (one of ``DATASETS``): from ``path`` (a local file) or the hub."""
    if name not in DATASETS:
        raise ValueError(f"unknown QA dataset {name!r}; choose one of {sorted(DATASETS)}")
    if path is not None:
        rows: Iterable[dict] = _read_local(Path(path))
    else:
        hub_repo, hub_config, splits = DATASETS[name]
        if split not in splits:
            raise ValueError(f"{name} has splits {sorted(splits)}, got {split!r}")
        import datasets

        rows = datasets.load_dataset(repo or hub_repo, config or hub_config, split=splits[split])
    out = []
    for i, row in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        out.append(example_from_row(dict(row), name, i))
    return out


def corpus_from_examples(examples: Iterable[QAExample]) -> list[Document]:
    """The examples' context paragraphs, one document per distinct (title, text)."""
    seen: dict[tuple[str, str], Document] = {}
    for ex in examples:
        for d in ex.context:
            seen.setdefault((d.title, d.text), d)
    return list(seen.values())
