"""QA metrics (exact values), the generated multi-hop KB, and the dataset loaders on fixtures in
each dataset's real schema (tests/fixtures/appo/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentrl_envs.tasks import qa

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "appo"


# ----------------------------------------------------------------------------- metrics
def test_normalize_answer():
    assert qa.normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert qa.normalize_answer("An apple, a pear.") == "apple pear"


def test_token_f1_and_em_exact():
    # pred [eiffel, tower] vs gold [eiffel, tower, in, paris]: common 2, P = 1, R = 1/2 -> F1 = 2/3
    assert qa.token_f1("the Eiffel Tower", "Eiffel tower in Paris") == pytest.approx(2 / 3)
    # pred [new, york] vs gold [new, york, city]: P = 1, R = 2/3 -> F1 = 0.8; the alias NYC gives 0
    assert qa.token_f1("New York", ["New York City", "NYC"]) == pytest.approx(0.8)
    assert qa.token_f1("nyc", ["New York City", "NYC"]) == 1.0
    # repeated tokens count once per match: pred [a1, a1] vs gold [a1]: common 1, P 1/2, R 1 -> 2/3
    assert qa.token_f1("paris paris", "Paris") == pytest.approx(2 / 3)
    assert qa.token_f1("yes", "no") == 0.0 and qa.token_f1("No.", "no") == 1.0
    assert qa.token_f1(None, "x") == 0.0
    assert qa.exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert qa.exact_match("Eiffel Tower in Paris", "eiffel tower") == 0.0
    assert qa.exact_match(None, "x") == 0.0


# ----------------------------------------------------------------------------- generated KB
def test_kb_deterministic_and_split():
    a, b, c = qa.generate_kb(0), qa.generate_kb(0), qa.generate_kb(1)
    assert a.questions == b.questions and a.documents == b.documents
    assert a.questions != c.questions
    ids = {s: {q.id for q in a.split[s]} for s in ("train", "valid")}
    assert not ids["train"] & ids["valid"]
    assert len(ids["train"]) + len(ids["valid"]) == len(a.questions)
    assert len(ids["valid"]) == int(len(a.questions) * qa.VALID_FRACTION)


def test_kb_questions_need_several_documents():
    kb = qa.generate_kb(0)
    titles = {d.title: d for d in kb.documents}
    assert len(titles) == len(kb.documents)  # one document per entity, unique titles
    kinds = {q.meta["kind"] for q in kb.questions}
    assert {"founder_birth_country", "birth_country_capital", "compare_founded"} <= kinds
    for q in kb.questions:
        assert len(q.hops) >= 2 and all(h in titles for h in q.hops)
        ans = qa.normalize_answer(q.answers[0])
        last = qa.normalize_answer(f"{q.hops[-1]} {titles[q.hops[-1]].text}")
        if q.meta["kind"] != "compare_founded":
            # the answer is in the last hop's document and not in the question or the first hop's
            assert ans in last
            assert ans not in qa.normalize_answer(q.question)
            assert f" {ans} " not in f" {qa.normalize_answer(titles[q.hops[0]].text)} "


# ----------------------------------------------------------------------------- loaders
def test_hotpotqa_hub_schema():
    exs = qa.load_qa_dataset("hotpotqa", path=FIX / "hotpotqa.jsonl")
    assert [e.answers for e in exs] == [("Seine",), ("yes",)]
    assert exs[0].id == "5a7a06935542990198eaf050" and exs[0].meta == {"type": "bridge", "level": "medium"}
    assert [d.title for d in exs[0].context] == ["Eiffel Tower", "Paris", "Lyon"]
    assert exs[0].context[1].text == "Paris is the capital of France. The Seine flows through the city."


def test_2wiki_original_json():
    exs = qa.load_qa_dataset("2wiki", path=FIX / "2wiki.json")
    assert exs[0].question == "Who is the father of the composer of The Magic Flute?"
    assert exs[0].answers == ("Leopold Mozart",) and exs[1].answers == ("Don Giovanni",)
    assert exs[0].id == "8813f87c0bdd11eba7f7acde48001122" and exs[1].meta["type"] == "comparison"
    assert exs[0].context[1].text == ("Wolfgang Amadeus Mozart was a composer born in Salzburg. "
                                      "His father was Leopold Mozart.")


def test_musique_aliases_and_paragraphs():
    exs = qa.load_qa_dataset("musique", path=FIX / "musique.jsonl", limit=1)
    assert len(exs) == 1
    assert exs[0].answers == ("forint", "Hungarian forint", "HUF")
    assert [d.title for d in exs[0].context] == ["Danube", "Budapest", "Hungary"]
    assert qa.token_f1("the Hungarian forint", exs[0].answers) == 1.0


def test_bamboogle_and_flashrag():
    exs = qa.load_qa_dataset("bamboogle", path=FIX / "bamboogle.jsonl")
    assert exs[1].answers == ("Romanian leu",) and exs[1].id == "bamboogle/1" and exs[1].context == ()
    fl = qa.load_qa_dataset("2wiki", path=FIX / "flashrag_2wiki.jsonl")
    assert [(e.id, e.answers) for e in fl] == [("dev_0", ("Leopold Mozart",)), ("dev_1", ("Don Giovanni",))]


def test_hub_path_uses_datasets(monkeypatch):
    import datasets

    rows = [{"Question": "q?", "Answer": "a"}]
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or rows)
    exs = qa.load_qa_dataset("bamboogle", split="test")
    assert calls == [(("RUC-NLPIR/FlashRAG_datasets", "bamboogle"), {"split": "test"})]
    assert exs[0].answers == ("a",)
    with pytest.raises(ValueError, match="splits"):
        qa.load_qa_dataset("bamboogle", split="train")


def test_corpus_and_errors():
    exs = qa.load_qa_dataset("hotpotqa", path=FIX / "hotpotqa.jsonl")
    corpus = qa.corpus_from_examples(exs)
    assert sorted(d.title for d in corpus) == ["Eiffel Tower", "Lyon", "Paris"]  # duplicates merged
    with pytest.raises(ValueError, match="unknown QA dataset"):
        qa.load_qa_dataset("squad")
    with pytest.raises(ValueError, match="no question/answer"):
        qa.example_from_row({"text": "x"}, "hotpotqa")
