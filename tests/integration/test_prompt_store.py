"""The prompt-cache store (--prompt-cache) against the real daemon with one slot: request A,
then B (which takes A's slot, so A's sequence goes into the store), then A with a new tail,
whose prefix comes back from the store. Greedy answers equal those of a server without a store
(--prompt-cache 0, which keeps nothing), and /metrics shows the hit, the reused tokens, the
entries and their bytes."""
from conftest import MODEL_ID
from test_api import metric

# Raw completions (no chat template), so that A and B share no prefix at all.
A = ("The lighthouse keeper kept a log of every ship that passed the rocks, and of the "
     "weather, the tides and the birds that nested on the gallery. ") * 3
TAIL1 = "On the first page he wrote:"
TAIL2 = "The last entry in the log reads:"
B = "Recipe for bread: flour, water, salt and yeast, mixed and left to rise overnight."


def complete(client, prompt):
    r = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=6, temperature=0)
    return r.choices[0].text, r.usage


def cached(usage):
    d = getattr(usage, "prompt_tokens_details", None)
    return (d.cached_tokens if d is not None else None) or 0


def test_store_hit_equals_cold(make_server):
    cold = make_server("--parallel", "1", "--ctx", "512", "--prompt-cache", "0")
    cc = cold.client()
    want1, _ = complete(cc, A + TAIL1)
    complete(cc, B)
    want2, u = complete(cc, A + TAIL2)
    assert cached(u) == 0  # no store: B's slot had nothing of A
    m = cold.metrics()
    assert metric(m, "ebb_prompt_store_bytes") == 0
    assert metric(m, "ebb_prompt_store_saves_total") == 0
    assert metric(m, "ebb_prompt_store_hits_total") == 0
    cold.stop()

    s = make_server("--parallel", "1", "--ctx", "512", "--prompt-cache", "64M")
    c = s.client()
    got1, u1 = complete(c, A + TAIL1)
    assert got1 == want1
    m = s.metrics()
    assert 0 < metric(m, "ebb_prompt_store_bytes") <= 64 << 20
    assert metric(m, "ebb_prompt_store_entries") == 0
    complete(c, B)  # A's sequence goes into the store
    m = s.metrics()
    assert metric(m, "ebb_prompt_store_saves_total") == 1
    assert metric(m, "ebb_prompt_store_entries") == 1
    assert metric(m, "ebb_prompt_store_bytes_used") > 0
    got2, u2 = complete(c, A + TAIL2)
    assert got2 == want2
    m = s.metrics()
    assert metric(m, "ebb_prompt_store_hits_total") == 1
    reused = metric(m, "ebb_prompt_store_tokens_total")
    # A's tokens (all but where A meets its tail) came from the store.
    assert u2.prompt_tokens - 12 <= reused + 12 and reused < u2.prompt_tokens, (reused, u2)
    assert cached(u2) == reused
    assert metric(m, "ebb_prompt_store_saves_total") == 2  # B's sequence went in too
    assert metric(m, "ebb_prompt_cache_hits_total") >= 1
    # The same prompt again: the slot holds it now, nothing more from the store.
    got3, _ = complete(c, A + TAIL2)
    assert got3 == want2
    assert metric(s.metrics(), "ebb_prompt_store_hits_total") == 1
