source .device-carry/env.sh
export XDG_CACHE_HOME=/tmp/cache
[ -f /tmp/8b.gguf ] || ebb-gen-model --shape llama3-8b --tokenizer-from .device-carry/tok.gguf --type q4_0 -o /tmp/8b.gguf >/dev/null 2>&1
[ -f /tmp/8bk.gguf ] || ebb-gen-model --shape llama3-8b --tokenizer-from .device-carry/tok.gguf --type q4_k_m -o /tmp/8bk.gguf >/dev/null 2>&1 &
timeout 300 test-kernels > /tmp/kt.log 2>&1; echo "kernels exit $? $(tail -1 /tmp/kt.log)"
for q in 32,4 64,2 64,4 128,1 128,2 256,1; do echo "== MVQ=$q"; EBB_CL_MVQ=$q ebb bench -m /tmp/8b.gguf --prompt-tokens 16 --gen-tokens 128 -r 2 2>&1 | grep -E "decode"; done
wait
for q in 32,4 64,2 128,1; do echo "== Q4_K_M MVQ=$q"; EBB_CL_MVQ=$q ebb bench -m /tmp/8bk.gguf --prompt-tokens 16 --gen-tokens 128 -r 2 2>&1 | grep -E "decode"; done
EBB_CL_MVQ=128,1 EBB_CL_PROFILE=gpu ebb bench -m /tmp/8b.gguf --prompt-tokens 16 --gen-tokens 64 2>&1 | grep profile | sort -k5 -g -r | head -14
EBB_CL_PROFILE=gpu ebb bench -m /tmp/8b.gguf --prompt-tokens 16 --gen-tokens 64 2>&1 | grep profile | sort -k5 -g -r | head -14
