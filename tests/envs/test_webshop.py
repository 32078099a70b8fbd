"""WebShop env: generated catalog, bm25s search, the paper's reward, oracle (runtime ~10 s)."""

from __future__ import annotations

import json
import random

import agentrl_envs  # noqa: F401  (registers agentrl/*)
import gymnasium as gym
import pytest
from agentrl_envs import expert_trace
from agentrl_envs.actions import format_action
from agentrl_envs.base import MALFORMED_MESSAGE
from agentrl_envs.webshop import WebShopEnv
from agentrl_envs.webshop.catalog import Goal, Product, get_catalog, reward, type_reward
from gymnasium.utils.env_checker import check_env

CATEGORIES = ["electronics", "fashion", "food", "furniture", "makeup"]  # WebShop's five


@pytest.fixture(scope="module")
def env():
    return WebShopEnv()


def run_oracle(env, seed, options=None):
    obs, info = env.reset(seed=seed, options=options)
    for n in range(1, 16):
        a = env.expert_action()
        if not a.startswith("search["):
            assert f"{a}" in info["admissible_actions"]
        obs, r, term, trunc, info = env.step(format_action(a))
        assert info["action_valid"], (a, obs)
        if term:
            return r, n, info
    return 0.0, 15, info


def test_catalog_shape():
    cat = get_catalog()
    assert len(cat.products) == 4000 and len(cat.goals) == 4000
    assert cat.families == CATEGORIES
    assert len(cat.split["valid"]) == 500 and len(cat.split["train"]) == 3500
    for g in cat.goals[:200]:
        p = cat.products[g.asin]
        # WebShop's price limit: the larger of two of the four multiples of 10 above the price
        assert g.price_upper % 10 == 0 and p.price < g.price_upper <= (p.price // 10 + 4) * 10
        assert g.price_upper >= (p.price // 10 + 2) * 10
        assert g.instruction.endswith(f"and price lower than {g.price_upper:.2f} dollars")
        assert 1 <= len(g.attributes) <= 3 and set(g.attributes) <= set(p.attributes)


def test_search_is_bm25_ranked():
    cat = get_catalog()
    p = cat.products[cat.goals[0].asin]
    hits = cat.search(p.name)
    assert len(hits) == 50 and hits[0] == p.asin  # the exact name ranks its product first
    assert cat.search("zzzz qqqq") == []  # no known word: no results


def test_reward_by_hand():
    p = Product(asin="B0TEST0001", name="Acme Slim Fit T-Shirt", category="fashion",
                query="men's t-shirts", product_category="Clothing › Men › T-Shirts",
                description="A slim fit shirt.", features=["Machine wash"], reviews=[],
                rating="4.0", price=30.0, options={"color": ["black", "white"], "size": ["small", "large"]},
                attributes=["slim fit", "machine wash"])
    g = Goal(asin=p.asin, category="fashion", query=p.query, name=p.name,
             product_category=p.product_category, instruction="...", price_upper=40.0,
             attributes=["slim fit", "cotton spandex"], options=["black", "large"])
    # attributes 1/2 (slim fit), options 1/2 (black), price 30 <= 40: (1 + 1 + 1) / (2 + 2 + 1)
    assert reward(p, {"color": "black", "size": "small"}, g) == pytest.approx(3 / 5)
    assert reward(p, {"color": "black", "size": "large"}, g) == pytest.approx(4 / 5)
    # price above the limit and no options: (1 + 0 + 0) / 5
    p_dear = Product(**{**p.__dict__, "price": 45.0})
    assert reward(p_dear, {}, g) == pytest.approx(1 / 5)
    # r_type: no shared title word, other query and category -> 0
    other = Product(**{**p.__dict__, "name": "Zed Oak Bookshelf", "query": "bookshelf",
                       "product_category": "Home › Furniture › Bookcases"})
    assert type_reward(other, g) == 0.0 and reward(other, {"color": "black"}, g) == 0.0
    # one of the goal title's 5 words ("acme") and nothing else matches -> 0.2 -> r_type 0.5
    half = Product(**{**other.__dict__, "name": "Acme Oak Bookshelf"})
    assert type_reward(half, g) == 0.5
    assert reward(half, {"color": "black", "size": "large"}, g) == pytest.approx(0.5 * 4 / 5)


def test_oracle_wins_valid_and_train_goals(env):
    wins = 0
    for split, n in (("valid", 500), ("train", 500)):
        for seed in range(n):
            r, steps, info = run_oracle(env, seed, {"split": split})
            assert r == 1.0 and info["won"] and steps <= 15
            wins += 1
    assert wins == 1000


def test_buying_without_options_scores_by_formula(env):
    _, info = env.reset(seed=3, options={"split": "valid"})
    g = env._goal
    env.step(format_action(env.expert_action()))  # search
    while env._page != "item":
        env.step(format_action(env.expert_action()))
    obs, r, term, _, info = env.step("<action>click[Buy Now]</action>")
    # target product: all attributes and the price match, no option chosen
    assert term and not info["won"]
    assert r == pytest.approx((len(g.attributes) + 1) / (len(g.attributes) + len(g.options) + 1))
    assert obs.startswith("Thank you for shopping with us!")


def test_determinism():
    a, b = WebShopEnv(), WebShopEnv()
    oa, _ = a.reset(seed=42, options={"families": ["food"]})
    ob, _ = b.reset(seed=42, options={"families": ["food"]})
    assert oa == ob
    for act in ["search[organic green tea]", "click[next >]", "click[< prev]"]:
        ra, rb = a.step(format_action(act)), b.step(format_action(act))
        assert ra[0] == rb[0] and ra[1] == rb[1] and ra[4]["state_sig"] == rb[4]["state_sig"]
    first = a._page_asins()[0]
    ra, rb = a.step(f"<action>click[{first}]</action>"), b.step(f"<action>click[{first}]</action>")
    assert ra[0] == rb[0]


def test_invalid_actions_penalised_and_episode_continues(env):
    env.reset(seed=5, options={"split": "valid"})
    obs, r, term, trunc, info = env.step("search for shoes")
    assert obs == MALFORMED_MESSAGE and r == pytest.approx(-0.1) and not term and not trunc
    obs, r, term, _, info = env.step("<action>buy the shoes</action>")
    assert obs.startswith("Invalid action:") and r == pytest.approx(-0.1) and not info["action_valid"]
    obs, r, term, _, info = env.step("<action>click[buy now]</action>")  # not on the search page
    assert obs.startswith("Invalid action:") and "WebShop [SEP] Instruction:" in obs
    env.step("<action>search[wooden chair]</action>")
    obs, r, term, _, info = env.step("<action>search[shoes]</action>")  # only on the search page
    assert not info["action_valid"] and r == pytest.approx(-0.1)
    obs, r, term, _, info = env.step("<action>click[b0nothere00]</action>")
    assert not info["action_valid"] and not term
    # a wrong search, then back: the oracle still wins within the 15 steps
    for _ in range(10):
        obs, r, term, _, info = env.step(format_action(env.expert_action()))
        if term:
            break
    assert info["won"] and r == 1.0


def test_check_env_and_time_limit():
    e = gym.make("agentrl/WebShop-v0")
    check_env(e.unwrapped)
    e.reset(seed=0)
    steps = [e.step("<action>click[nothing]</action>") for _ in range(15)]
    assert [s[2] for s in steps] == [False] * 15
    assert [s[3] for s in steps] == [False] * 14 + [True]  # truncated at WebShop's 15 steps


def test_reset_options(env):
    train = {g.asin for g in env.catalog.split["train"]}
    for fam in CATEGORIES:
        for seed in range(3):
            _, info = env.reset(seed=seed, options={"split": "valid", "families": [fam]})
            assert info["task_family"] == fam and info["goal_asin"] not in train
    _, info = env.reset(seed=None)
    assert info["task_family"] in CATEGORIES


@pytest.mark.parametrize("options, match", [
    ({"split": "test"}, "^unknown split 'test'; valid: train, valid$"),
    ({"families": ["toys"]}, "^unknown task family 'toys'; valid: "),
    ({"families": []}, "^families must not be empty; valid: "),
    ({"goal": 1}, r"^unknown reset option\(s\) \['goal'\]; valid: split, families$"),
])
def test_bad_options_raise(env, options, match):
    with pytest.raises(ValueError, match=match):
        env.reset(seed=0, options=options)


def test_real_webshop_format_loader(tmp_path):
    # three products in WebShop's items_shuffle / items_ins_v2 / items_human_ins schema
    items = [
        {"asin": "B000000001", "name": "Glow Vegan Lipstick", "category": "beauty",
         "query": "lipstick", "product_category": "Beauty & Personal Care › Makeup › Lips",
         "full_description": "Long lasting color.", "small_description": ["Vegan", "Matte"],
         "pricing": "$10.00 - $20.00", "average_rating": "N.A.",
         "customization_options": {"Color": [{"value": "Red ", "image": None}, {"value": "Nude"}]}},
        {"asin": "B000000002", "name": "Steel Water Bottle", "category": "garden",
         "query": "water bottle", "product_category": "Home & Kitchen › Kitchen › Bottles",
         "full_description": "", "small_description": "Keeps drinks cold", "pricing": "",
         "customization_options": {}},
        {"asin": "B000000003", "name": "Pure Green Tea", "category": "grocery",
         "query": "green tea", "product_category": "Grocery › Beverages › Tea",
         "full_description": "Organic tea.", "small_description": [], "pricing": "$5.50"},
    ]
    ins = {"B000000001": {"attributes": ["long lasting"], "instruction": "i want a long lasting lipstick",
                          "instruction_attributes": ["long lasting"], "instruction_options": ["red"]},
           "B000000002": {"attributes": [], "instruction": "i need a water bottle",
                          "instruction_attributes": [], "instruction_options": []},
           "B000000003": {"attributes": ["organic"], "instruction": "i want organic green tea",
                          "instruction_attributes": ["organic"], "instruction_options": {}}}
    human = {"B000000003": [{"instruction": "buy me organic tea", "instruction_attributes": ["organic"],
                             "instruction_options": []}]}
    for name, obj in (("items_shuffle.json", items), ("items_ins_v2.json", ins),
                      ("items_human_ins.json", human)):
        (tmp_path / name).write_text(json.dumps(obj))
    e = gym.make("agentrl/WebShop-v0", data_dir=str(tmp_path)).unwrapped
    cat = e.catalog
    assert cat.families == ["beauty", "garden", "grocery"]
    lip = cat.products["B000000001"]
    assert 10.0 <= lip.price <= 20.0 and lip.options == {"color": ["red", "nude"]}
    assert cat.products["B000000002"].price == 100.0  # WebShop: no pricing -> $100
    assert cat.products["B000000002"].features == ["Keeps drinks cold"]
    tea_goal = next(g for g in cat.goals if g.asin == "B000000003")
    assert tea_goal.price_upper in (20.0, 30.0, 40.0)  # two of 10/20/30/40 above $5.50, larger
    for fam in cat.families:
        for split in ("train", "valid"):
            pool = [g for g in cat.split[split] if g.category == fam]
            if pool:
                r, _, info = run_oracle(e, 0, {"split": split, "families": [fam]})
                assert r == 1.0
    h = WebShopEnv(data_dir=str(tmp_path), human_goals=True)
    assert [g.instruction.split(",")[0] for g in h.catalog.goals] == ["buy me organic tea"]


def test_random_play_never_raises(env):
    rng = random.Random(0)
    junk = ["", "<action>click[]</action>", "<action>search[]</action>", "<action>click</action>",
            "<action>search[a]]</action>", "<action>click[[buy now]]</action>",
            "<action>\u00e9 search[\u00e9]</action>"]
    for ep in range(40):
        _, info = env.reset(seed=ep)
        for _ in range(15):
            if rng.random() < 0.3:
                resp = rng.choice(junk)
            else:
                adm = rng.choice(info["admissible_actions"])
                resp = format_action(adm.replace("<query>", rng.choice(["red shoes", "tea", "xyzzy"])))
            obs, r, term, _, info = env.step(resp)
            assert env.observation_space.contains(obs) and (-0.1 <= r <= 1.0)
            if term:
                break


def test_long_click_is_not_echoed_whole(env):
    # "'x x x ...' is not clickable" quotes ~200 chars of the command, not all 400k
    env.reset(seed=5, options={"split": "valid"})
    env.step("<action>search[wooden chair]</action>")
    short, *_ = env.step("<action>click[nothing]</action>")
    obs, r, term, _, info = env.step("<action>click[" + " ".join(["x"] * 200_000) + "]</action>")
    assert not info["action_valid"] and r == pytest.approx(-0.1) and not term
    assert len(obs) <= len(short) + 200 and "x x x...' is not clickable" in obs
    assert len(info["action"]) == 4096 and len(info["action_sig"]) <= 4096


def test_type_reward_of_titles_without_ascii_words(tmp_path):
    base = dict(category="fashion", query="dress", product_category="Clothing › Women › Dresses",
                description="a red silk dress", features=["red"], reviews=[], rating="4.0",
                price=20.0, options={}, attributes=["silk"])
    goal = dict(category="fashion", query="dress", product_category=base["product_category"],
                instruction="...", attributes=["silk"], options=[], price_upper=30.0)
    # a non-ASCII title tokenizes (Unicode words): the exact product gets the full reward
    p = Product(asin="B0UNI00001", name="连衣裙 — 真丝", **base)
    g = Goal(asin=p.asin, name=p.name, **goal)
    assert type_reward(p, g) == 1.0 and reward(p, {}, g) == 1.0
    # a goal title with no words at all: WebShop's title_score fallback 0.2, so the query or
    # category match decides (1.0), else 0.5 -- never a forced 0
    stars = Product(asin="B0UNI00002", name="★ ★ ★", **base)
    gs = Goal(asin=stars.asin, name=stars.name, **goal)
    assert type_reward(stars, gs) == 1.0 and reward(stars, {}, gs) == 1.0
    elsewhere = Product(**{**stars.__dict__, "query": "lamp", "product_category": "Home › Lighting"})
    assert type_reward(elsewhere, gs) == 0.5
    # end to end: the oracle buys the non-ASCII-named product of a WebShop-format catalog
    items = [{"asin": p.asin, "name": p.name, "category": "fashion", "query": "dress",
              "product_category": base["product_category"], "full_description": "a red silk dress",
              "small_description": ["silk"], "pricing": "$20.00"}]
    ins = {p.asin: {"attributes": ["silk"], "instruction": "i need a red silk dress",
                    "instruction_attributes": ["silk"], "instruction_options": []}}
    (tmp_path / "items_shuffle.json").write_text(json.dumps(items))
    (tmp_path / "items_ins_v2.json").write_text(json.dumps(ins))
    split = "valid" if get_catalog(str(tmp_path)).split["valid"] else "train"
    r, _, info = run_oracle(WebShopEnv(data_dir=str(tmp_path)), 0, {"split": split})
    assert r == 1.0 and info["won"]


def test_reused_env_plays_like_a_fresh_one(env):
    # envs persist across episodes (reset, not rebuilt): after other episodes, one left on an
    # item page with options chosen, the module's env replays a goal as a new instance does
    options = {"split": "valid", "families": ["fashion"]}
    expert_trace(env, 4, options, max_steps=4)
    reused = expert_trace(env, 7, options)
    fresh = WebShopEnv()
    assert expert_trace(fresh, 7, options) == reused
    assert reused[-1][1] == 1.0 and reused[-1][4]["won"]
    # one catalog and search index per process, whatever the spelling of the same files
    assert WebShopEnv().catalog is fresh.catalog is get_catalog() is get_catalog(None, False, 0)
