source .device-carry/env.sh
export XDG_CACHE_HOME=/tmp/cache
ebb-gen-model --shape llama3-8b --tokenizer-from .device-carry/tok.gguf --type q4_0 -o /tmp/8b.gguf >/dev/null 2>&1 &
EBB_PROFILES="llama3-8b:q4_0:8:--prompt-tokens,16,--gen-tokens,64 llama3-8b:q4_0:8:--batch,4,--prompt-tokens,16,--gen-tokens,32 qwen3-30b-a3b:q4_k_m:8:--prompt-tokens,16,--gen-tokens,64" bash bench/gpu-profile.sh
wait
for u in 1 2 4 8; do echo "== MVU=$u"; EBB_CL_MVU=$u ebb bench -m /tmp/8b.gguf --prompt-tokens 16 --gen-tokens 128 -r 2 2>&1 | grep -E "decode|traffic"; done
m=/tmp/models/qwen3-30b-a3b-q4_k_m-8.gguf
for n in 24 64; do echo "== expert-cache $n"; timeout 120 ebb bench -m $m --expert-cache $n --prompt-tokens 64 --gen-tokens 64 2>&1 | grep -iE "prefill|decode|expert|error|launches"; done
