#!/usr/bin/env python3
"""Concurrent streamed chat load against an OpenAI-compatible server (ebb or llama-server).

For each concurrency level C, C clients each send --rounds streamed /v1/chat/completions
requests one after the other (max_tokens --tokens, ignore_eos so every answer has that length),
and the script reports the aggregate output tokens per second over the level's wall time and
the time to first token (p50 / p99 over all requests of the level). Tokens are counted from
the usage the final chunk carries (stream_options.include_usage), else from the content chunks.

With --conversations K,N,R it measures the prompt-cache store (docs/PERFORMANCE.md): K chat
conversations take turns, R rounds each; a conversation opens with a document of N numbers and
each round adds a question and resends the whole history (with the answers so far), as a chat
client does. Against a server with one slot, every resend finds the slot holding another
conversation, so only a store of evicted prefixes can spare the prefill. Prints the time to
first token of the first round (cold) and of the resends (median, p90).

With --prefix-reuse N,M it instead measures the prompt cache: a prompt of N numbers (about
2 tokens each) is sent, then sent again with M more numbers at the end, and the time to first
token of each (and the prompt sizes the server reports) are printed.

With --long-chat N,N,.. it measures long prompts as an editor agent sends them, one request at
a time: for each N a chat of a system message and one user message of about N tokens (numbers,
distinct per chat), streamed with --tokens new tokens; the time to first token (cold: no prefix
of it cached), the decode rate after it (tokens after the first over the time after the first),
then a follow-up turn (the history, the answer, a short question) and its time to first token
(the prompt cache's work). A short request first warms the server up.

Uses httpx (async) or aiohttp, whichever is installed (--long-chat needs neither). Usage:
  load-chat.py --url http://127.0.0.1:8077 --levels 1,4,8,16,32 [--tokens 128] [--json out.json]
  load-chat.py --url http://127.0.0.1:8077 --prefix-reuse 1000,50
  load-chat.py --url http://127.0.0.1:8077 --conversations 3,400,4
"""
import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.request

try:
    import httpx
except ImportError:  # pragma: no cover - the other clients
    try:  # the same API under another name (what some registries' openai package pulls in)
        import httpx2 as httpx
    except ImportError:
        httpx = None
try:
    import aiohttp
except ImportError:
    aiohttp = None


def body(args, client, rnd, text=None):
    # A distinct opening per client and round, so no request is a cache hit of another's.
    if text is None:
        text = f"Client {client}, request {rnd}: {args.prompt}"
    msgs = text if isinstance(text, list) else [{"role": "user", "content": text}]
    return {
        "model": args.model,
        "messages": msgs,
        "max_tokens": args.tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


def parse_events(buf, st):
    """Consumes complete SSE events from buf (a bytearray); updates st. Returns True at [DONE]."""
    while True:
        i = buf.find(b"\n\n")
        if i < 0:
            return False
        ev = bytes(buf[:i])
        del buf[: i + 2]
        for line in ev.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return True
            obj = json.loads(data)
            if obj.get("usage"):
                st["usage"] = obj["usage"].get("completion_tokens")
                st["prompt_tokens"] = obj["usage"].get("prompt_tokens")
            for ch in obj.get("choices") or []:
                delta = ch.get("delta") or {}
                st["text"] = st.get("text", "") + (delta.get("content") or "")
                if delta.get("content"):
                    if st["ttft"] is None:
                        st["ttft"] = time.perf_counter() - st["t0"]
                    st["chunks"] += 1


async def one_httpx(session, args, client, rnd, text=None):
    st = {"t0": time.perf_counter(), "ttft": None, "chunks": 0, "usage": None}
    buf = bytearray()
    async with session.stream("POST", args.url + "/v1/chat/completions",
                              json=body(args, client, rnd, text)) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
        async for part in r.aiter_raw():
            buf += part.replace(b"\r\n", b"\n")
            if parse_events(buf, st):
                break
    return st


async def one_aiohttp(session, args, client, rnd, text=None):
    st = {"t0": time.perf_counter(), "ttft": None, "chunks": 0, "usage": None}
    buf = bytearray()
    async with session.post(args.url + "/v1/chat/completions",
                            json=body(args, client, rnd, text)) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.read())[:200]!r}")
        async for part in r.content.iter_any():
            buf += part.replace(b"\r\n", b"\n")
            if parse_events(buf, st):
                break
    return st


async def level(args, c):
    results = []

    async def client(session, i, one):
        for rnd in range(args.rounds):
            st = await one(session, args, i, rnd)
            st["t1"] = time.perf_counter()
            results.append(st)

    t0 = time.perf_counter()
    if httpx is not None:
        limits = httpx.Limits(max_connections=c + 4, max_keepalive_connections=c + 4)
        async with httpx.AsyncClient(timeout=args.timeout, limits=limits) as s:
            await asyncio.gather(*(client(s, i, one_httpx) for i in range(c)))
    else:
        conn = aiohttp.TCPConnector(limit=c + 4)
        tmo = aiohttp.ClientTimeout(total=args.timeout)
        async with aiohttp.ClientSession(connector=conn, timeout=tmo) as s:
            await asyncio.gather(*(client(s, i, one_aiohttp) for i in range(c)))
    wall = time.perf_counter() - t0
    toks = sum(st["usage"] if st["usage"] is not None else st["chunks"] for st in results)
    ttfts = sorted(st["ttft"] for st in results if st["ttft"] is not None)

    def pct(p):
        if not ttfts:
            return float("nan")
        return ttfts[min(len(ttfts) - 1, int(round(p / 100 * (len(ttfts) - 1))))]

    per_req = [(st["usage"] or st["chunks"]) / (st["t1"] - st["t0"]) for st in results]
    return {"clients": c, "requests": len(results), "tokens": toks, "wall_s": wall,
            "tok_s": toks / wall, "ttft_p50_s": pct(50), "ttft_p99_s": pct(99),
            "stream_tok_s_median": statistics.median(per_req) if per_req else 0.0}


async def prefix_reuse(args, n, more):
    """Time to first token of a long prompt, of another one first, and of the long one resent
    with `more` numbers at the end."""
    base = " ".join(str(1000 + i) for i in range(n))
    longer = base + " " + " ".join(str(5000 + i) for i in range(more))
    other = " ".join(str(7000 + i) for i in range(n))
    out = []
    if httpx is not None:
        async with httpx.AsyncClient(timeout=args.timeout) as s:
            for label, text in (("cold", base), ("other", other), ("resent+new", longer)):
                out.append((label, await one_httpx(s, args, 0, 0, text)))
    else:
        async with aiohttp.ClientSession() as s:
            for label, text in (("cold", base), ("other", other), ("resent+new", longer)):
                out.append((label, await one_aiohttp(s, args, 0, 0, text)))
    for label, st in out:
        print(f"{args.label:>12} prefix {label:>10}: prompt {st.get('prompt_tokens')} tokens, "
              f"TTFT {st['ttft'] * 1e3:8.1f} ms", flush=True)
    cold, warm = out[0][1]["ttft"], out[2][1]["ttft"]
    print(f"{args.label:>12} prefix reuse: TTFT resent+new / cold = {warm / cold:.3f}")
    return [{"label": args.label, "case": lbl, "prompt_tokens": st.get("prompt_tokens"),
             "ttft_s": st["ttft"]} for lbl, st in out]


def one_stdlib(args, client, rnd, text):
    """One streamed request with http.client (sequential modes need no async client)."""
    import http.client
    import urllib.parse
    u = urllib.parse.urlparse(args.url)
    st = {"t0": time.perf_counter(), "ttft": None, "chunks": 0, "usage": None}
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=args.timeout)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body(args, client, rnd, text)),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    buf = bytearray()
    while True:
        part = r.read1(65536)
        if not part:
            break
        buf += part.replace(b"\r\n", b"\n")
        if parse_events(buf, st):
            break
    c.close()
    return st


async def conversations(args, k, n, rounds):
    """K conversations in turn, each resending its history with a new question per round."""
    hist = []
    for c in range(k):
        doc = " ".join(str(1000 * (c + 1) + i) for i in range(n))
        hist.append([{"role": "user", "content": f"Document {c}: {doc}\nSummarise it."}])
    cold, warm = [], []

    async def run(one, s):
        for r in range(rounds):
            for c in range(k):
                if r:
                    hist[c].append({"role": "user", "content": f"Question {r}: and number {r}?"})
                st = await one(s, args, c, r, list(hist[c]))
                hist[c].append({"role": "assistant", "content": st.get("text", "")})
                (warm if r else cold).append(st["ttft"])
                print(f"{args.label:>12} conversation {c} round {r}: prompt "
                      f"{st.get('prompt_tokens')} tokens, TTFT {st['ttft'] * 1e3:8.1f} ms",
                      flush=True)

    async def one_sync(_s, a, c, r, text):
        return one_stdlib(a, c, r, text)

    await run(one_sync, None)
    warm.sort()
    p90 = warm[min(len(warm) - 1, int(round(0.9 * (len(warm) - 1))))]
    row = {"label": args.label, "conversations": k, "doc_numbers": n, "rounds": rounds,
           "ttft_cold_median_s": statistics.median(cold),
           "ttft_resend_median_s": statistics.median(warm), "ttft_resend_p90_s": p90}
    print(f"{args.label:>12} conversations: TTFT cold median {row['ttft_cold_median_s'] * 1e3:.1f} "
          f"ms, resends median {row['ttft_resend_median_s'] * 1e3:.1f} ms p90 {p90 * 1e3:.1f} ms "
          f"({len(warm)} resends)", flush=True)
    return row


def long_chat(args, sizes):
    """Time to first token and decode rate of chats of about N tokens, and of a follow-up."""
    one_stdlib(args, 0, 0, "Say hello.")  # warm-up
    rows = []
    for i, n in enumerate(sizes):
        nums = " ".join(str(10000 + 7919 * i + j) for j in range(max(1, n // 3)))
        msgs = [{"role": "system", "content": "You are a careful coding assistant."},
                {"role": "user", "content": f"Chat {i}. A listing follows.\n{nums}\n"
                                            "What is the last number?"}]
        st = one_stdlib(args, 0, i, msgs)
        t_all = time.perf_counter() - st["t0"]
        gen = st["usage"] if st["usage"] is not None else st["chunks"]
        rate = (gen - 1) / (t_all - st["ttft"]) if gen > 1 and t_all > st["ttft"] else 0.0
        follow = msgs + [{"role": "assistant", "content": st.get("text", "")},
                         {"role": "user", "content": "And the first number?"}]
        st2 = one_stdlib(args, 0, i, follow)
        row = {"label": args.label, "target_tokens": n, "prompt_tokens": st.get("prompt_tokens"),
               "ttft_s": st["ttft"], "decode_tok_s": rate,
               "followup_prompt_tokens": st2.get("prompt_tokens"), "followup_ttft_s": st2["ttft"]}
        rows.append(row)
        print(f"{args.label:>12} long chat {n:6d}: prompt {row['prompt_tokens']} tokens, TTFT "
              f"{st['ttft'] * 1e3:8.1f} ms, decode {rate:7.1f} tok/s; follow-up prompt "
              f"{row['followup_prompt_tokens']} tokens, TTFT {st2['ttft'] * 1e3:8.1f} ms",
              flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8077")
    ap.add_argument("--levels", default="1,4,8,16,32")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="requests per client per level")
    ap.add_argument("--model", help="model id (default: the first of /v1/models)")
    ap.add_argument("--prompt", default="Write a long story about a lighthouse keeper.")
    ap.add_argument("--label", default="server")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    ap.add_argument("--prefix-reuse", help="N,M: prompt-cache test (see above) instead of load")
    ap.add_argument("--conversations", help="K,N,R: prompt-cache store test (see above)")
    ap.add_argument("--long-chat", help="N,N,..: long-prompt chats (see above)")
    args = ap.parse_args()
    if httpx is None and aiohttp is None and not (args.conversations or args.long_chat):
        sys.exit("load-chat.py needs httpx or aiohttp")
    if not args.model:
        with urllib.request.urlopen(args.url + "/v1/models", timeout=30) as r:
            args.model = json.load(r)["data"][0]["id"]
    if args.long_chat:
        rows = long_chat(args, [int(x) for x in args.long_chat.split(",")])
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(rows) + "\n")
        return
    if args.conversations:
        k, n, rounds = (int(x) for x in args.conversations.split(","))
        args.tokens = min(args.tokens, 16)
        row = asyncio.run(conversations(args, k, n, rounds))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
        return
    if args.prefix_reuse:
        n, more = (int(x) for x in args.prefix_reuse.split(","))
        args.tokens = 4
        rows = asyncio.run(prefix_reuse(args, n, more))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(rows) + "\n")
        return
    rows = []
    for c in [int(x) for x in args.levels.split(",")]:
        r = asyncio.run(level(args, c))
        r["label"] = args.label
        rows.append(r)
        print(f"{args.label:>12} clients {c:3d}: {r['tok_s']:9.1f} tok/s aggregate, "
              f"{r['stream_tok_s_median']:7.1f} tok/s per stream (median), TTFT p50 "
              f"{r['ttft_p50_s'] * 1e3:8.1f} ms p99 {r['ttft_p99_s'] * 1e3:8.1f} ms "
              f"({r['requests']} requests, {r['tokens']} tokens, {r['wall_s']:.1f} s)",
              flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(rows) + "\n")


if __name__ == "__main__":
    main()
