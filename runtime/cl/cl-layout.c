/* Weight layouts: choice per device, accessor codegen, placement on the device. */
#include "cl-layout.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"

/* Decoder facts per type: block elements, block bytes, decoder suffix, split kind (0 none,
 * 4 = 4-bit planes, 8 = 8-bit planes). */
struct tinfo {
    uint32_t type, blk, tsize;
    const char *name, *dec;
    int split;
};

static const struct tinfo tinfos[] = {
    {EBB_GGML_F32, 1, 4, "F32", "f32", 0},        {EBB_GGML_F16, 1, 2, "F16", "f16", 0},
    {EBB_GGML_BF16, 1, 2, "BF16", "bf16", 0},     {EBB_GGML_Q8_0, 32, 34, "Q8_0", "q8_0", 8},
    {EBB_GGML_Q4_0, 32, 18, "Q4_0", "q4_0", 4},   {EBB_GGML_Q4_1, 32, 20, "Q4_1", "q4_1", 4},
    {EBB_GGML_Q5_0, 32, 22, "Q5_0", "q5_0", 0},   {EBB_GGML_Q5_1, 32, 24, "Q5_1", "q5_1", 0},
    {EBB_GGML_Q4_K, 256, 144, "Q4_K", "q4_k", 0}, {EBB_GGML_Q5_K, 256, 176, "Q5_K", "q5_k", 0},
    {EBB_GGML_Q6_K, 256, 210, "Q6_K", "q6_k", 0},
};

static const struct tinfo *tinfo(uint32_t type)
{
    for (size_t i = 0; i < sizeof(tinfos) / sizeof(tinfos[0]); i++)
        if (tinfos[i].type == type)
            return &tinfos[i];
    return NULL;
}

static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    float f;
    if (e == 0)
        f = ldexpf((float)m, -24);
    else if (e == 31)
        f = m ? NAN : INFINITY;
    else
        f = ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -f : f;
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* fp32 -> fp16 bits, round to nearest even; exact for the scales it is given (fp16 values and
 * Q4_0's -8d). */
static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000u, e = (x >> 23) & 255, m = x & 0x7fffffu;
    if (e == 255)
        return (uint16_t)(s | 0x7c00u | (m ? 0x200u : 0));
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 31)
        return (uint16_t)(s | 0x7c00u);
    if (he <= 0) {
        if (he < -10)
            return (uint16_t)s;
        m |= 0x800000u;
        uint32_t sh = (uint32_t)(14 - he), r = m >> sh, rem = m & ((1u << sh) - 1),
                 half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
        r++; /* a carry into the exponent is the right result, up to infinity */
    return (uint16_t)(s | r);
}

/* A matmul_mms tile from "T,MI[,W[,KB]]" (x may separate as , does): tokens 8..64, 16-row
 * groups 1, 2 or 4, warps 1..32 (a power of two), 32-blocks loaded at once 1, 2 or 4, the warps'
 * partial sums within 48 KiB of local memory. Left unchanged when v is absent or invalid. */
static void mms_tile_env(const char *v, const struct ebb_cl_dev_info *di, uint32_t *tt,
                         uint32_t *mi, uint32_t *w, uint32_t *kb)
{
    unsigned a = 0, b = 0, c = *w, d = *kb;
    char buf[32] = "";
    for (size_t i = 0; v && v[i] && i + 1 < sizeof(buf); i++)
        buf[i] = v[i] == 'x' ? ',' : v[i];
    if (v && sscanf(buf, "%u,%u,%u,%u", &a, &b, &c, &d) >= 2 &&
        (a == 8 || a == 16 || a == 32 || a == 64) && (b == 1 || b == 2 || b == 4) && c >= 1 &&
        c <= 32 && !(c & (c - 1)) && (d == 1 || d == 2 || d == 4) &&
        (size_t)(c > 1 ? c / 2 : 1) * 16 * b * a * 4 <= 48 * 1024 && 32 * c <= di->max_wg) {
        *tt = a;
        *mi = b;
        *w = c;
        *kb = d;
    }
}

struct ebb_cl_tuning ebb_cl_tuning_for(const struct ebb_cl_dev_info *di)
{
    struct ebb_cl_tuning t = {
        .mv_wg = 1,
        .mv_rows = 16,
        .mm_t = 8,
        .mm_k = 128,
        .mm_wg = 16,
        .norm_wg = 16,
        .att_tq = 8,
        .att_tk = 32,
        .att_chunk = 256,
        .mma_r = 64,
        .mma_t = 64,
        .mma_k = 32,
        .mma_v = 1,
        .mms_t = 32,
        .mms_mi = 1,
        .mms_w = 8,
        .mms_kb = 2,
        .mg_mi = 1,
        .mg_w = 8,
        .mg_kb = 2,
        .mmp_t = 32,
        .mmp_mi = 4,
        .mmp_w = 4,
        .mmp_kb = 2,
        .att_q8 = 1,
        .att_rope = 1,
        .att_hnorm = 1,
        .mvr = 8,
        .mvo = 1,
        .mvu = 2,
        .q8r_fold = 1,
    };
    /* Whole-block decoding keeps 32 weights and 32 inputs live per work-item: a win on CPUs
     * (vector registers, 5x on PoCL), a loss on GPUs (H100, Llama-3-8B-shaped Q4_0 decode:
     * 15.6 tok/s with it, 66 without), where four-at-a-time decoding keeps registers free and
     * a warp's loads contiguous. EBB_CL_BLOCKDEC=0/1 overrides. */
    t.block_dec = di->is_gpu ? 0 : 1;
    const char *bd = getenv("EBB_CL_BLOCKDEC");
    if (bd && (*bd == '0' || *bd == '1'))
        t.block_dec = (uint32_t)(*bd - '0');
    /* Folding the norm and SwiGLU into decode's products saves launches on GPUs, where the
     * per-row recomputation is spare arithmetic; on CPUs it costs n_ff exponentials per row of
     * the down projection and a norm per row of the output head (PoCL, SmolLM2 decode:
     * docs/PERFORMANCE.md), so there they run once per token first (the layers' norms stay
     * folded where matvec_cpu shares them over its rows). EBB_CL_MVFOLD=0/1 overrides. */
    t.mv_fold = di->is_cpu ? 0 : 1;
    const char *fo = getenv("EBB_CL_MVFOLD");
    if (fo && (*fo == '0' || *fo == '1'))
        t.mv_fold = (uint32_t)(*fo - '0');
    /* CPUs: decode's products through matvec_cpu, 4 rows per work-item sharing each input
     * block, 16-wide accumulators (PoCL, SmolLM2 decode: docs/PERFORMANCE.md). EBB_CL_MVCPU=0/1
     * and EBB_CL_MVCPU_R=1|2|4|8 override. */
    t.mv_cpu = di->is_cpu ? 1 : 0;
    t.mv_cpu_r = 4;
    const char *mc = getenv("EBB_CL_MVCPU"), *mcr = getenv("EBB_CL_MVCPU_R");
    if (mc && (*mc == '0' || *mc == '1'))
        t.mv_cpu = (uint32_t)(*mc - '0');
    /* Products of 2..4 token rows (batched decode steps of a few slots) also run matvec_cpu,
     * once per row: PoCL, SmolLM2, ebb bench --batch 4, aggregate decode 51-55 tok/s against
     * 34-38 through the tiled matmul; at 8 rows the matmul wins (75-77 against 44-62).
     * EBB_CL_MVCPU_MAX=N overrides (0: never). */
    const char *mcm = getenv("EBB_CL_MVCPU_MAX");
    t.mvcpu_max = t.mv_cpu ? 4 : 0;
    if (t.mv_cpu && mcm && *mcm >= '0' && *mcm <= '9')
        t.mvcpu_max = (uint32_t)atoi(mcm);
    unsigned mcrv = mcr ? (unsigned)atoi(mcr) : 0;
    if (mcrv == 1 || mcrv == 2 || mcrv == 4 || mcrv == 8)
        t.mv_cpu_r = mcrv;
    /* CPUs: the top-k over the vocabulary on the host (a read-back is a copy there, and the
     * device passes took 1-2 ms a token on PoCL for SmolLM2's 49152 logits). EBB_CL_TOPKHOST=0/1
     * overrides. */
    t.topk_host = di->is_cpu ? 1 : 0;
    const char *th = getenv("EBB_CL_TOPKHOST");
    if (th && (*th == '0' || *th == '1'))
        t.topk_host = (uint32_t)(*th - '0');
    /* Local memory that is ordinary memory buys nothing but barriers. */
    t.mm_local = !di->local_is_global;
    if (di->is_gpu) {
        /* Work-items sharing one row, so that consecutive lanes read consecutive weights: a
         * wave on AMD (64); two warps on NVIDIA (64; H100, 3 runs each: Llama-3-8B-shape Q4_0
         * decode 67.0-67.2 tok/s vs 62.0-62.3 with 32, SmolLM2-shape 625-639 vs 543-549);
         * other GPUs take 32, within every limit we know. */
        t.mv_wg = di->vendor == EBB_CL_VENDOR_AMD || di->vendor == EBB_CL_VENDOR_NVIDIA ? 64 : 32;
        t.mv_rows = 2;
        if (di->vendor == EBB_CL_VENDOR_NVIDIA) {
            /* 4-bit blocks a whole block per work-item, x staged in local memory for 16 rows of
             * 16 work-items, partials added in two rounds (H200, decode, tok/s: Llama-3-8B shape
             * Q4_0 157-158 vs 71 before, Llama-3.2-1B shape 607-616 vs 336, SmolLM2 shape
             * 764-837 vs 700-756; docs/ENGINE.md). Other GPUs keep the shapes above until
             * measured there (EBB_CL_MV=16,16 EBB_CL_MVQ16=1 EBB_CL_MVXL=1 tries them). */
            t.mv_wg = 16;
            t.mv_rows = 16;
            t.mv_q16 = 1;
            t.mv_xlocal = 1;
            t.mv_flat = 1;
        }
        t.mm_t = 8;
        t.mm_wg = 64;
        t.norm_wg = 64;
        t.att_tq = 32;
        t.att_tk = 32;
        /* Decode attention in chunks of 64 positions: 4x the work-groups of 256 (H100, 8B
         * shape, decode after a 512-token prompt: 251 tok/s vs 194 with 256, 241 with 128). */
        t.att_chunk = 64;
        /* A decode attention work-group serves every query head of its KV head, which reads
         * the cache once for the group (H100, 8B shape (groups of 4), decode after a 4096-token
         * prompt: 242.0 tok/s against 176.9 a head per work-group; after 16: 293-309 either way,
         * within the run's noise). */
        t.att_gqa = 1;
        if (di->vendor == EBB_CL_VENDOR_ARM || di->vendor == EBB_CL_VENDOR_APPLE)
            t.mm_t = 4;
        /* The tiled matmul gives each work-item a row of its own, so a warp's loads are a row
         * apart; sharing rows as matvec does is what GPUs want (docs/ENGINE.md). */
        t.mm_coop = 1;
        t.mm_gemm_min = di->max_wg >= 256 ? 32 : 0;
        if (di->vendor == EBB_CL_VENDOR_NVIDIA) {
            /* Decode with 8-bit inputs: dp4a over 4-bit weights, a warp per row, 4 rows per
             * work-group (H100, Llama-3-8B-shape Q4_0 decode after 16 prompt tokens: 270.9
             * tok/s; 64 x 4 244.9; float inputs 16 x 16 114.6; docs/PERFORMANCE.md). */
            t.mv_q8 = 1;
            t.mv_ptx = 1;
            /* Batches of up to 8 rows through matvec_q8r, 4 rows per weight read (H100, 8B
             * shape, ebb bench --batch: 8 rows 10.8 ms a step with 4, 11.8 with 8, 12.8 with 16;
             * 32 rows 31.6, 32.8, 34.6 ms; longer batches go to matmul_mms below). */
            t.q8r_max = 8;
            t.mvr = 4;
            /* Two output rows a warp, the norm and the gate folded into the rows' quantization
             * (H100, 8B shape, --batch 4: 7.30 ms a step unfolded with one row a warp, 5.45
             * folded, 4.78 with two rows a warp, 6.92 with four; --batch 8 10.37, 9.53, 7.38,
             * 7.65; --batch 2 5.84, 4.29, 4.04, 4.68). */
            t.mvo = 2;
            /* Longer products of 4-bit weights through matmul_mms (tensor cores, each warp's
             * weights loaded straight into its fragments, the inputs split over the warps):
             * 9..31 rows with 16 tokens x 32 rows x 8 warps a work-group, from 32 rows (prefill)
             * 32 tokens x 64 rows x 4 warps (H100, 8B shape Q4_0: ebb bench --batch 16 9.4 ms a
             * step against matvec_q8r's 17.2, --batch 64 19.1 against 57.0; pp512 5541 tok/s
             * against matmul_mmb's 3095; 4 rows 7.3 ms with matvec_q8r, 9.1 with matmul_mms). */
            t.mms_max = 1u << 20;
            t.mms_big = 32;
            t.mms_t = 16;
            t.mms_mi = 2;
            t.mms_w = 8;
            t.mms_kb = 2;
            /* The grouped MoE prefill's tile (moe_group_mms): 2 x 16 rows, 4 warps (H100,
             * Qwen3-30B-A3B Q4_K_M mix pp512: 2172-2236 tok/s against 1834 with matmul_mms's
             * 2 x 16 x 8 warps; 4 x 16 x 4 warps, one block a step 2286, 16 warps 1608). */
            t.mg_mi = 2;
            t.mg_w = 4;
            t.mg_kb = 2;
            /* Prefill GEMM on tensor cores (mma.sync), once the device passes the probe, in
             * 64 x 64 tiles of 32 inputs a step, the next step's loads issued before this
             * step's products (H100, 8B pp512: 2046 tok/s; without the early loads 1974, 64
             * inputs a step 1998, 128 1539, 128 x 64 tiles 1315, 64 x 128 1800). */
            t.mm_mma = 1;
            t.mma_pf = 1;
            /* matmul_mmb for those tiles: split 4-bit weights and the inputs read with
             * vector loads from pointers set up once (H100, pp512: 8B 2981 tok/s against
             * matmul_mma's 2758, 1B 14081 against 12345; docs/PERFORMANCE.md). */
            t.mma_v = 2;
            /* Two 32-blocks a step (half the barriers; H100 pp512: 8B 3106 tok/s against 2982
             * with one, 1B 14365 against 13791; 128 x 64 tiles 2567, 64 x 128 2805). */
            t.mma_k = 64;
            /* Prefill attention on tensor cores too (attn_prefill_mma; H100, 8B pp512 2752
             * tok/s against 2074 with attn_prefill, a 4096-token prompt 2454 against 825). */
            t.att_mma = 1;
            t.mv_wg = 32;
            t.mv_rows = 4;
        }
    }
    /* EBB_CL_MM=tile|coop|gemm overrides the prefill kernel (for measurements and tests). */
    const char *mm = getenv("EBB_CL_MM");
    if (mm && (!strcmp(mm, "tile") || !strcmp(mm, "coop") || !strcmp(mm, "gemm"))) {
        t.mm_coop = strcmp(mm, "tile") != 0;
        t.mm_gemm_min = !strcmp(mm, "gemm") && di->max_wg >= 256 ? 2 : 0;
    }
    /* Small batches (continuous batching's decode steps of 2..64 rows) run matmul_coop below
     * mm_gemm_min rows (each weight read once per MM_T rows: a matvec over MM_T rows at once)
     * and the GEMM (or matmul_mma) from there. EBB_CL_GEMM_MIN=N moves that threshold (0:
     * never the GEMM) and EBB_CL_MM_T=N (1..32, a power of two) the rows per coop/tiled
     * work-item, so the two can be compared at each batch size on a GPU. */
    const char *gm = getenv("EBB_CL_GEMM_MIN");
    if (gm && *gm >= '0' && *gm <= '9' && di->max_wg >= 256)
        t.mm_gemm_min = (uint32_t)atoi(gm);
    const char *mtn = getenv("EBB_CL_MM_T");
    unsigned mtv = mtn ? (unsigned)atoi(mtn) : 0;
    if (mtv >= 1 && mtv <= 32 && !(mtv & (mtv - 1)))
        t.mm_t = mtv;
    /* EBB_CL_MVQ16=0|1 and EBB_CL_MVRED=tree|flat override the matvec variants. */
    const char *mq = getenv("EBB_CL_MVQ16");
    if (mq && (*mq == '0' || *mq == '1'))
        t.mv_q16 = (uint32_t)(*mq - '0');
    const char *xl = getenv("EBB_CL_MVXL");
    if (xl && (*xl == '0' || *xl == '1'))
        t.mv_xlocal = (uint32_t)(*xl - '0');
    const char *red = getenv("EBB_CL_MVRED");
    if (red && (!strcmp(red, "tree") || !strcmp(red, "flat")))
        t.mv_flat = !strcmp(red, "flat");
    /* EBB_CL_MVQ8=0|1 and EBB_CL_PTX=0|1 override the 8-bit input path and inline PTX (PTX is
     * NVIDIA's alone). */
    const char *q8 = getenv("EBB_CL_MVQ8");
    if (q8 && (*q8 == '0' || *q8 == '1'))
        t.mv_q8 = (uint32_t)(*q8 - '0');
    /* EBB_CL_Q8R=N: products of 2..N rows run matvec_q8r (0: never); EBB_CL_MVR=R its rows per
     * weight read (4, 8 or 16). */
    const char *q8r = getenv("EBB_CL_Q8R"), *mvr = getenv("EBB_CL_MVR");
    unsigned qn = q8r ? (unsigned)atoi(q8r) : 0, qr = mvr ? (unsigned)atoi(mvr) : 0;
    if (q8r && *q8r >= '0' && *q8r <= '9' && qn <= 1024)
        t.q8r_max = qn;
    if (qr == 4 || qr == 8 || qr == 16)
        t.mvr = qr;
    /* EBB_CL_MVO=O: matvec_q8r's output rows per warp (1, 2 or 4). */
    const char *mvo = getenv("EBB_CL_MVO");
    if (mvo && (!strcmp(mvo, "1") || !strcmp(mvo, "2") || !strcmp(mvo, "4")))
        t.mvo = (uint32_t)(*mvo - '0');
    /* EBB_CL_MVU=U: matvec_q8's blocks a work-item loads per step (1..8). */
    const char *mvu = getenv("EBB_CL_MVU");
    if (mvu && *mvu >= '1' && *mvu <= '8' && !mvu[1])
        t.mvu = (uint32_t)(*mvu - '0');
    /* EBB_CL_Q8RFOLD=0: batches run rmsnorm and swiglu before quantize_x8_rows (measurements). */
    const char *q8f = getenv("EBB_CL_Q8RFOLD");
    if (q8f && (*q8f == '0' || *q8f == '1'))
        t.q8r_fold = (uint32_t)(*q8f - '0');
    /* The other block types of the files (K-quants, Q8_0, Q5_0/Q5_1) on int8 inputs too, in
     * their raw blocks (kq8.cl), wherever mv_q8 is on; EBB_CL_KQ8=0 keeps them on the float
     * matvec (for measurements: both in one device call). */
    t.kq8 = 1;
    const char *kq = getenv("EBB_CL_KQ8");
    if (kq && (*kq == '0' || *kq == '1'))
        t.kq8 = (uint32_t)(*kq - '0');
    /* F16 / BF16 rows in matvec eight weights (16 bytes) per work-item and step instead of
     * four; EBB_CL_MVH8=0 gives back the four (for measurements). */
    t.mv_h8 = 1;
    const char *h8 = getenv("EBB_CL_MVH8");
    if (h8 && (*h8 == '0' || *h8 == '1'))
        t.mv_h8 = (uint32_t)(*h8 - '0');
    const char *ptx = getenv("EBB_CL_PTX");
    if (ptx && (*ptx == '0' || *ptx == '1'))
        t.mv_ptx = (uint32_t)(*ptx - '0');
    /* EBB_CL_MMA_TILE=R,T[,K[,PF]]: matmul_mma's tile (rows and tokens 64 or 128, K 32, 64 or
     * 128 inputs per step, PF 1 to load the next step during this one; tokens may also be 32;
     * H100, 8B pp512: 64 x 64 x 32 1934 tok/s, 128 x 128 x 32 1362). */
    const char *mt = getenv("EBB_CL_MMA_TILE");
    unsigned v[4] = {t.mma_r, t.mma_t, t.mma_k, t.mma_pf};
    char mts[32] = ""; /* "x" separates as "," does (128x64: scripts split settings on ",") */
    for (size_t i = 0; mt && mt[i] && i + 1 < sizeof(mts); i++)
        mts[i] = mt[i] == 'x' ? ',' : mt[i];
    if (mt && sscanf(mts, "%u,%u,%u,%u", &v[0], &v[1], &v[2], &v[3]) >= 2 &&
        (v[0] == 64 || v[0] == 128) && (v[1] == 32 || v[1] == 64 || v[1] == 128) &&
        (v[2] == 32 || v[2] == 64 || v[2] == 128) && v[3] <= 1 &&
        (v[0] + v[1]) * (v[2] + 8) * 2 <= 48 * 1024) { /* the tiles fit 48 KiB of local memory */
        t.mma_r = v[0];
        t.mma_t = v[1];
        t.mma_k = v[2];
        t.mma_pf = v[3];
    }
    const char *ar = getenv("EBB_CL_ROPEATT");
    if (ar && (*ar == '0' || *ar == '1'))
        t.att_rope = (uint32_t)(*ar - '0');
    const char *ah = getenv("EBB_CL_ATTHN");
    if (ah && (*ah == '0' || *ah == '1'))
        t.att_hnorm = (uint32_t)(*ah - '0');
    const char *am = getenv("EBB_CL_ATTMMA");
    if (am && (*am == '0' || *am == '1'))
        t.att_mma = (uint32_t)(*am - '0');
    const char *ag = getenv("EBB_CL_ATTGQA");
    if (ag && (*ag == '0' || *ag == '1'))
        t.att_gqa = (uint32_t)(*ag - '0');
    const char *aq = getenv("EBB_CL_ATTQ8");
    if (aq && (*aq == '0' || *aq == '1'))
        t.att_q8 = (uint32_t)(*aq - '0');
    const char *mma = getenv("EBB_CL_MMA");
    if (mma && (*mma == '0' || *mma == '1'))
        t.mm_mma = (uint32_t)(*mma - '0');
    /* EBB_CL_MMA=2: matmul_mmb instead of matmul_mma for the tensor-core tiles. */
    if (mma && *mma == '2') {
        t.mm_mma = 1;
        t.mma_v = 2;
    }
    /* EBB_CL_MMS=N: products of 2..N token rows run matmul_mms (tensor cores, weights read
     * once per MS_T tokens; 0: never); EBB_CL_MMS_TILE=T,MI[,W[,KB]] its tokens (8, 16, 32 or 64)
     * and 16-row groups (1, 2 or 4) per work-group, and its warps (1 to 32, a power of two; their
     * partial sums must fit 48 KiB of local memory), and the 32-blocks a warp loads at once (1, 2,
     * 4). */
    const char *ms = getenv("EBB_CL_MMS"), *mb = getenv("EBB_CL_MMS_BIG");
    if (ms && *ms >= '0' && *ms <= '9' && atoi(ms) <= 1 << 20)
        t.mms_max = (uint32_t)atoi(ms);
    if (mb && *mb >= '0' && *mb <= '9' && atoi(mb) <= 1 << 20)
        t.mms_big = (uint32_t)atoi(mb);
    mms_tile_env(getenv("EBB_CL_MMS_TILE"), di, &t.mms_t, &t.mms_mi, &t.mms_w, &t.mms_kb);
    mms_tile_env(getenv("EBB_CL_MMP_TILE"), di, &t.mmp_t, &t.mmp_mi, &t.mmp_w, &t.mmp_kb);
    /* EBB_CL_MOE_TILE=16,MI[,W[,KB]]: moe_group_mms's tile (its tokens are moe.cl's 16 pairs). */
    uint32_t mg_t = 16, mg_mi = t.mg_mi, mg_w = t.mg_w, mg_kb = t.mg_kb;
    mms_tile_env(getenv("EBB_CL_MOE_TILE"), di, &mg_t, &mg_mi, &mg_w, &mg_kb);
    if (mg_t == 16) {
        t.mg_mi = mg_mi;
        t.mg_w = mg_w;
        t.mg_kb = mg_kb;
    }
    if (di->vendor != EBB_CL_VENDOR_NVIDIA)
        t.mv_ptx = 0;
    /* The 8-bit decode path's 4-byte dots through cl_khr_integer_dot_product's packed builtins
     * where the device lists the extension with packed 4 x 8-bit inputs, unless PTX is on (dp4a
     * wins on NVIDIA); the engine keeps it only once ebb_cl_idp_probe passes. It matters only
     * where mv_q8 is on. Not yet run on any device (none here has the extension; compile-tested
     * offline by scripts/cl-offline-check.sh). EBB_CL_IDP=0|1 overrides (1 on any device
     * without PTX, still subject to the probe). */
    t.mv_idp = di->idp ? 1 : 0;
    const char *idp = getenv("EBB_CL_IDP");
    if (idp && (*idp == '0' || *idp == '1'))
        t.mv_idp = (uint32_t)(*idp - '0');
    if (t.mv_ptx)
        t.mv_idp = 0;
    if (di->max_wg < 256)
        t.mm_mma = 0;
    if (di->max_wg < EBB_CL_Q8_WG)
        t.mv_q8 = 0;
    /* EBB_CL_ATT_CHUNK=N (a power of two, 32..1024) overrides decode attention's positions per
     * work-group. */
    const char *ac = getenv("EBB_CL_ATT_CHUNK");
    unsigned acn = ac ? (unsigned)atoi(ac) : 0;
    if (acn >= 32 && acn <= 1024 && !(acn & (acn - 1)))
        t.att_chunk = acn;
    /* EBB_CL_MV=WG,ROWS overrides the matvec shape (for measurements; WG a power of two). */
    const char *mv = getenv("EBB_CL_MV");
    unsigned mw = 0, mr = 0;
    if (mv && sscanf(mv, "%u,%u", &mw, &mr) == 2 && mw && !(mw & (mw - 1)) && mr) {
        t.mv_wg = mw;
        t.mv_rows = mr;
    }
    while (t.mv_wg * t.mv_rows > di->max_wg && t.mv_rows > 1)
        t.mv_rows /= 2;
    /* matvec_q8's shape: the matvec's, or with PTX (warp sums, then the warps' partials through
     * local memory) EBB_CL_MVQ=WG,ROWS, WG a multiple of 32. */
    if (!t.mv_ptx || !t.mvq_wg)
        t.mvq_wg = t.mv_wg, t.mvq_rows = t.mv_rows;
    const char *mvq = getenv("EBB_CL_MVQ");
    unsigned qw = 0, qrw = 0;
    if (t.mv_ptx && mvq && sscanf(mvq, "%u,%u", &qw, &qrw) == 2 && qw && qw % 32 == 0 &&
        qw <= 1024 && qrw && qw * qrw <= di->max_wg)
        t.mvq_wg = qw, t.mvq_rows = qrw;
    while (t.mvq_wg * t.mvq_rows > di->max_wg && t.mvq_rows > 1)
        t.mvq_rows /= 2;
    /* EBB_CL_QIN=0|1|2: decode's products of 4-bit weights quantize their input inside each
     * work-group (matvec_q8_qin) instead of launching quantize_x8 first: 1 for inputs without
     * SwiGLU (the norm-folded ones), 2 for the [gate | up] ones too; EBB_CL_QIN_MAX=N only up to
     * N inputs, EBB_CL_QIN_OUT=N only up to N output rows; EBB_CL_QIN_ROWS=R rows per work-group
     * (default matvec_q8's). Off by default until measured: every work-group re-reads the float
     * row (and the norm's weights) from cache. */
    t.qin = 0;
    t.qin_max = 0;
    t.qin_rows = t.mvq_rows;
    const char *qi = getenv("EBB_CL_QIN"), *qim = getenv("EBB_CL_QIN_MAX");
    const char *qir = getenv("EBB_CL_QIN_ROWS"), *qio = getenv("EBB_CL_QIN_OUT");
    if (qi && *qi >= '0' && *qi <= '2' && !qi[1])
        t.qin = (uint32_t)(*qi - '0');
    if (qim && *qim >= '0' && *qim <= '9' && atoi(qim) >= 0)
        t.qin_max = (uint32_t)atoi(qim);
    t.qin_out_max = 0;
    if (qio && *qio >= '0' && *qio <= '9' && atoi(qio) >= 0)
        t.qin_out_max = (uint32_t)atoi(qio);
    unsigned qrv = qir ? (unsigned)atoi(qir) : 0;
    if (qrv >= 1 && qrv <= 64)
        t.qin_rows = qrv;
    while ((uint64_t)t.mvq_wg * t.qin_rows > di->max_wg && t.qin_rows > 1)
        t.qin_rows /= 2;
    while (t.mm_wg > di->max_wg)
        t.mm_wg /= 2;
    /* EBB_CL_NORM_WG=N (a power of two, 1..256) overrides the work-group of row reductions
     * and decode attention. */
    const char *nwg = getenv("EBB_CL_NORM_WG");
    unsigned nwv = nwg ? (unsigned)atoi(nwg) : 0;
    if (nwv >= 1 && nwv <= 256 && !(nwv & (nwv - 1)))
        t.norm_wg = nwv;
    while (t.norm_wg > di->max_wg)
        t.norm_wg /= 2;
    /* Decode attention's work-group: norm_wg, except on NVIDIA GPUs 128, where its passes split
     * over positions and dimensions and the few work-groups of a short context (8 for the 8B
     * shape at one chunk) are latency-bound. EBB_CL_ATT_WG=N (a power of two, 1..256)
     * overrides. */
    t.att_wg = di->is_gpu && di->vendor == EBB_CL_VENDOR_NVIDIA && !nwg ? 128 : t.norm_wg;
    const char *awg = getenv("EBB_CL_ATT_WG");
    unsigned awv = awg ? (unsigned)atoi(awg) : 0;
    if (awv >= 1 && awv <= 256 && !(awv & (awv - 1)))
        t.att_wg = awv;
    while (t.att_wg > di->max_wg)
        t.att_wg /= 2;
    while (t.att_tq > di->max_wg)
        t.att_tq /= 2;
    /* Local memory: matmul stages mm_t x mm_k floats; attention 2 x att_tk x head_dim (up to
     * 256) floats. Shrink tiles on small-local devices. */
    while ((uint64_t)t.mm_t * t.mm_k * 4 > di->local_mem / 2 && t.mm_k > 32)
        t.mm_k /= 2;
    while ((uint64_t)2 * t.att_tk * 256 * 4 > di->local_mem / 2 && t.att_tk > 4)
        t.att_tk /= 2;
    return t;
}

bool ebb_cl_layout_ok(const struct ebb_cl_dev_info *di, const struct ebb_cl_layout *l,
                      uint64_t n_elements)
{
    const struct tinfo *ti = tinfo(l->type);
    if (!ti)
        return false;
    if (l->order == EBB_CL_ORDER_RAW)
        return l->storage == EBB_CL_STORE_BUFFER;
    if (!ti->split)
        return false;
    if (l->storage == EBB_CL_STORE_IMAGE1D) {
        uint64_t texels = n_elements / 32 * (ti->split == 8 ? 2 : 1);
        return di->image && texels <= di->image1d_buf_max;
    }
    if (l->storage == EBB_CL_STORE_IMAGE2D) {
        size_t w, h;
        ebb_cl_image2d_limits(di, &w, &h);
        uint64_t texels = n_elements / 32 * (ti->split == 8 ? 2 : 1);
        return di->image && w && h && texels <= (uint64_t)w * h;
    }
    return true;
}

void ebb_cl_image2d_limits(const struct ebb_cl_dev_info *di, size_t *w, size_t *h)
{
    *w = di->image ? di->image2d_w : 0;
    *h = di->image ? di->image2d_h : 0;
    const char *env = getenv("EBB_CL_IMAGE2D_MAX");
    unsigned long ew = 0, eh = 0;
    if (env) {
        char *end = NULL;
        ew = strtoul(env, &end, 10);
        if (end && *end == ',')
            eh = strtoul(end + 1, NULL, 10);
    }
    if (ew && ew < *w)
        *w = ew;
    if (eh && eh < *h)
        *h = eh;
}

bool ebb_cl_image2d_shape(uint64_t tpr, uint64_t n_rows, size_t w_max, size_t h_max, size_t *w,
                          size_t *h)
{
    if (!tpr || !n_rows || !w_max || !h_max)
        return false;
    if (tpr <= w_max) {
        uint64_t r = (n_rows + h_max - 1) / h_max; /* rows side by side */
        if (r * tpr > w_max)
            return false;
        *w = (size_t)(r * tpr);
        *h = (size_t)((n_rows + r - 1) / r);
        return true;
    }
    uint64_t k = (tpr + w_max - 1) / w_max; /* image rows per weight row */
    if (n_rows * k > h_max)
        return false;
    *w = (size_t)((tpr + k - 1) / k);
    *h = (size_t)(n_rows * k);
    return true;
}

/* Texels per weight row of the quant and scale planes of an image2d weight. */
static void i2d_tpr(const struct tinfo *ti, uint32_t n_in, uint64_t *q, uint64_t *s)
{
    uint64_t nb = n_in / 32;
    *q = nb * (ti->split == 8 ? 2 : 1);
    *s = (nb + 1) / 2;
}

bool ebb_cl_layout_fits(const struct ebb_cl_dev_info *di, const struct ebb_cl_layout *l,
                        uint32_t n_in, uint32_t n_out)
{
    if (!ebb_cl_layout_ok(di, l, (uint64_t)n_in * n_out))
        return false;
    if (l->storage != EBB_CL_STORE_IMAGE2D)
        return true;
    size_t wm, hm, w, h;
    uint64_t tq, ts;
    ebb_cl_image2d_limits(di, &wm, &hm);
    i2d_tpr(tinfo(l->type), n_in, &tq, &ts);
    return n_in % 32 == 0 && ebb_cl_image2d_shape(tq, n_out, wm, hm, &w, &h) &&
           ebb_cl_image2d_shape(ts, n_out, wm, hm, &w, &h);
}

/* With EBB_CL_LAYOUT=image2d: says on stderr, once per type and shape in a row, that a weight
 * of that type (n_out x n_in, or n_out elements when n_in is 0) cannot be an image2d within the
 * limits w x h (0 x 0: no image support) and where it goes instead. */
static void note_image2d(uint32_t type, uint64_t n_out, uint32_t n_in, size_t w, size_t h,
                         const char *instead)
{
    static uint64_t last[3];
    if (last[0] == type + 1 && last[1] == n_out && last[2] == n_in)
        return;
    last[0] = type + 1;
    last[1] = n_out;
    last[2] = n_in;
    const struct tinfo *ti = tinfo(type);
    if (n_in)
        fprintf(stderr,
                "ebb: EBB_CL_LAYOUT=image2d: a %s weight of %llu x %u does not fit the "
                "image2d limits %zu x %zu; placed as %s\n",
                ti ? ti->name : "?", (unsigned long long)n_out, n_in, w, h, instead);
    else
        fprintf(stderr,
                "ebb: EBB_CL_LAYOUT=image2d: not possible for a %s weight of %llu "
                "elements (image2d limits %zu x %zu); %s layout used\n",
                ti ? ti->name : "?", (unsigned long long)n_out, w, h, instead);
}

struct ebb_cl_layout ebb_cl_layout_choose(const struct ebb_cl_dev_info *di, uint32_t type,
                                          uint64_t n_elements)
{
    struct ebb_cl_layout raw = {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    struct ebb_cl_layout split = {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
    struct ebb_cl_layout img = {type, EBB_CL_STORE_IMAGE1D, EBB_CL_ORDER_SPLIT};
    struct ebb_cl_layout img2d = {type, EBB_CL_STORE_IMAGE2D, EBB_CL_ORDER_SPLIT};
    const char *env = getenv("EBB_CL_LAYOUT");
    if (env && !strcmp(env, "image2d")) {
        if (ebb_cl_layout_ok(di, &img2d, n_elements))
            return img2d;
        size_t w, h;
        ebb_cl_image2d_limits(di, &w, &h);
        note_image2d(type, n_elements, 0, w, h, "the default");
    }
    if (env && !strcmp(env, "raw"))
        return raw;
    if (env && !strcmp(env, "split") && ebb_cl_layout_ok(di, &split, n_elements))
        return split;
    if (env && !strcmp(env, "image") && ebb_cl_layout_ok(di, &img, n_elements))
        return img;
    /* CPUs sharing host memory read the file's blocks in place: no copy, and the caches hide
     * the block layout. GPUs get separate planes so that a warp's loads of quants and of scales
     * are each contiguous, through the texture path where images exist. */
    if (!di->is_gpu && di->host_unified)
        return raw;
    /* Measured on an H100 (NVIDIA OpenCL 3.0, driver 580), SmolLM2 Q4_1 decode: raw blocks 432
     * tok/s, split planes 380, image1d 375; the whole-block decoders make the file's layout the
     * fastest there, so NVIDIA keeps it (copied once, fused Q/K/V and gate/up). */
    if (di->vendor == EBB_CL_VENDOR_NVIDIA)
        return raw;
    if (ebb_cl_layout_ok(di, &img, n_elements))
        return img;
    if (ebb_cl_layout_ok(di, &split, n_elements))
        return split;
    return raw;
}

const char *ebb_cl_layout_name(const struct ebb_cl_layout *l, char *buf, size_t cap)
{
    const struct tinfo *ti = tinfo(l->type);
    snprintf(buf, cap, "%s/%s/%s", ti ? ti->name : "?",
             l->order == EBB_CL_ORDER_RAW ? "raw" : "split",
             l->storage == EBB_CL_STORE_IMAGE1D   ? "image1d"
             : l->storage == EBB_CL_STORE_IMAGE2D ? "image2d"
                                                  : "buffer");
    return buf;
}

bool ebb_cl_layout_has_deq32(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    const struct tinfo *ti = tinfo(l->type);
    bool b32_only = ti && (ti->type == EBB_GGML_Q5_0 || ti->type == EBB_GGML_Q4_K ||
                           ti->type == EBB_GGML_Q5_K || ti->type == EBB_GGML_Q6_K);
    return ti && tu->block_dec && (b32_only || ti->split);
}

bool ebb_cl_layout_has_q16(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    const struct tinfo *ti = tinfo(l->type);
    return ti && ti->split == 4 && tu->mv_q16 && !tu->block_dec &&
           l->storage == EBB_CL_STORE_BUFFER;
}

bool ebb_cl_layout_has_kq8(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    uint32_t t = l->type;
    bool kt = t == EBB_GGML_Q8_0 || t == EBB_GGML_Q5_0 || t == EBB_GGML_Q5_1 ||
              t == EBB_GGML_Q4_K || t == EBB_GGML_Q5_K || t == EBB_GGML_Q6_K;
    return kt && tu->mv_q8 && tu->kq8 && l->order == EBB_CL_ORDER_RAW &&
           l->storage == EBB_CL_STORE_BUFFER;
}

bool ebb_cl_layout_has_qw(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    return ebb_cl_layout_has_q16(l, tu) ||
           ((l->type == EBB_GGML_Q4_K || l->type == EBB_GGML_Q8_0 || l->type == EBB_GGML_Q6_K ||
             l->type == EBB_GGML_Q5_0 || l->type == EBB_GGML_Q5_K) &&
            l->order == EBB_CL_ORDER_RAW && l->storage == EBB_CL_STORE_BUFFER && !tu->block_dec);
}

ebb_err ebb_cl_layout_prologue(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu,
                               char *buf, size_t cap, struct ebb_diag *diag)
{
    const struct tinfo *ti = tinfo(l->type);
    char name[64];
    if (!ti || (l->order == EBB_CL_ORDER_SPLIT && !ti->split) ||
        (l->order == EBB_CL_ORDER_RAW && l->storage != EBB_CL_STORE_BUFFER))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "no OpenCL decoder for layout %s",
                            ebb_cl_layout_name(l, name, sizeof(name)));
    int n = snprintf(
        buf, cap,
        "/* layout %s */\n"
        "#define MV_WG %u\n#define MV_ROWS %u\n#define MM_T %u\n#define MM_K %u\n"
        "#define MM_WG %u\n#define MM_LOCAL %u\n#define NORM_WG %u\n"
        "#define BLOCK_DEC %u\n#define MV_FLAT %u\n#define MV_XLOCAL %u\n"
        "#define W_BLK %u\n#define MV_PTX %u\n#define MV_Q8 %u\n#define MM_MMA %u\n"
        "#define MA_R %u\n#define MA_T %u\n#define MA_K %u\n#define MA_PF %u\n"
        "#define MVR %u\n#define MV_CPU %u\n#define MV_CPU_R %u\n#define MS_T %u\n"
        "#define MS_MI %u\n#define MS_W %u\n#define MS_KB %u\n#define MVO %u\n#define MVU %u\n"
        "#define MVQ_WG %u\n#define MVQ_ROWS %u\n#define MV_IDP %u\n",
        ebb_cl_layout_name(l, name, sizeof(name)), tu->mv_wg, tu->mv_rows, tu->mm_t, tu->mm_k,
        tu->mm_wg, tu->mm_local, tu->norm_wg, tu->block_dec, tu->mv_flat, tu->mv_xlocal, ti->blk,
        tu->mv_ptx, tu->mv_q8 && ebb_cl_layout_has_q16(l, tu) ? 1u : 0u, tu->mm_mma, tu->mma_r,
        tu->mma_t, tu->mma_k, tu->mma_pf, tu->mvr, tu->mv_cpu, tu->mv_cpu_r ? tu->mv_cpu_r : 4,
        tu->mms_t ? tu->mms_t : 32, tu->mms_mi ? tu->mms_mi : 1, tu->mms_w ? tu->mms_w : 8,
        tu->mms_kb ? tu->mms_kb : 2, tu->mvo ? tu->mvo : 1, tu->mvu ? tu->mvu : 2,
        tu->mv_ptx && tu->mvq_wg ? tu->mvq_wg : tu->mv_wg,
        tu->mv_ptx && tu->mvq_wg ? tu->mvq_rows : tu->mv_rows, tu->mv_idp && !tu->mv_ptx ? 1u : 0u);
    if (n < 0 || (size_t)n >= cap)
        return EBB_ERANGE;
    size_t used = (size_t)n;
    const char *bits = ti->split == 8 ? "q8" : "q4";
    if (l->order == EBB_CL_ORDER_RAW)
        n = snprintf(buf + used, cap - used,
                     "#define W_RAW 1\n"
                     "#define W_ARGS __global const uchar *w_a, ulong w_off\n"
                     "#define W_PASS w_a, w_off\n"
                     "#define READ_W4(o, i) w4_raw_%s(w_a + w_off, (ulong)(n_in / %u) * %u, "
                     "(o), (i))\n",
                     ti->dec, ti->blk, ti->tsize);
    else if (l->storage == EBB_CL_STORE_BUFFER)
        n = snprintf(buf + used, cap - used,
                     "#define W_ARGS __global const uchar *w_a, __global const float2 *w_b\n"
                     "#define W_PASS w_a, w_b\n"
                     "#define READ_W4(o, i) w4_split_%s(w_a, w_b, n_in / 32, (o), (i))\n%s",
                     bits, ti->split == 4 ? "#define W_SPLIT4 1\n" : "");
    else if (l->storage == EBB_CL_STORE_IMAGE1D)
        n = snprintf(buf + used, cap - used,
                     "#define EBB_IMAGES 1\n"
                     "#define W_ARGS __read_only image1d_buffer_t w_a, __global const float2 *w_b\n"
                     "#define W_PASS w_a, w_b\n"
                     "#define READ_W4(o, i) w4_img_%s(w_a, w_b, n_in / 32, (o), (i))\n",
                     bits);
    else
        n = snprintf(buf + used, cap - used,
                     "#define EBB_IMAGES2D 1\n"
                     "#define W_ARGS __read_only image2d_t w_a, __read_only image2d_t w_b\n"
                     "#define W_PASS w_a, w_b\n"
                     "#define READ_W4(o, i) w4_i2d_%s(w_a, w_b, n_in / 32, (o), (i))\n",
                     bits);
    if (n < 0 || (size_t)n >= cap - used)
        return EBB_ERANGE;
    used += (size_t)n;
    bool b32_only = ti->type == EBB_GGML_Q5_0 || ti->type == EBB_GGML_Q4_K ||
                    ti->type == EBB_GGML_Q5_K || ti->type == EBB_GGML_Q6_K;
    if (b32_only && tu->block_dec) {
        n = snprintf(buf + used, cap - used,
                     "#define W_DEQ32(o, b, lo, hi) b32_raw_%s(w_a + w_off, "
                     "(ulong)(n_in / %u) * %u, (o), (b), (lo), (hi))\n",
                     ti->dec, ti->blk, ti->tsize);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (ti->split && tu->block_dec) {
        const char *sto = l->storage == EBB_CL_STORE_IMAGE1D   ? "img"
                          : l->storage == EBB_CL_STORE_IMAGE2D ? "i2d"
                                                               : "split";
        if (l->order == EBB_CL_ORDER_RAW)
            n = snprintf(buf + used, cap - used,
                         "#define W_DOT32(o, b, xt) d32_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (xt))\n"
                         "#define W_DEQ32(o, b, lo, hi) b32_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (lo), (hi))\n",
                         ti->dec, ti->tsize, ti->dec, ti->tsize);
        else
            n = snprintf(buf + used, cap - used,
                         "#define W_DOT32(o, b, xt) d32_%s_%s(w_a, w_b, n_in / 32, (o), (b), "
                         "(xt))\n"
                         "#define W_DEQ32(o, b, lo, hi) b32_%s_%s(w_a, w_b, n_in / 32, (o), "
                         "(b), (lo), (hi))\n",
                         sto, bits, sto, bits);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (tu->mv_h8 && l->order == EBB_CL_ORDER_RAW &&
        (ti->type == EBB_GGML_F16 || ti->type == EBB_GGML_BF16)) {
        n = snprintf(buf + used, cap - used,
                     "#define W_RD8(o, i) w8_raw_%s(w_a + w_off, (ulong)n_in * 2, (o), (i))\n",
                     ti->dec);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (ebb_cl_layout_has_kq8(l, tu)) {
        n = snprintf(buf + used, cap - used,
                     "#define W_KQ8(o, b, xq, xd) kq8_raw_%s(w_a + w_off, "
                     "(ulong)(n_in / %u) * %u, (o), (b), (xq), (xd))\n",
                     ti->dec, ti->blk, ti->tsize);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (ebb_cl_layout_has_q16(l, tu)) {
        if (l->order == EBB_CL_ORDER_RAW)
            n = snprintf(buf + used, cap - used,
                         "#define W_Q16(o, b, v, dm) q16_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (v), (dm))\n"
                         "#define W_QW(o, b, k, v, dm) qw_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (k), (v), (dm))\n",
                         ti->dec, ti->tsize, ti->dec, ti->tsize);
        else
            n = snprintf(buf + used, cap - used,
                         "#define W_Q16(o, b, v, dm) q16_split_q4(w_a, w_b, n_in / 32, (o), (b), "
                         "(v), (dm))\n"
                         "#define W_QW(o, b, k, v, dm) qw_split_q4(w_a, w_b, n_in / 32, (o), (b), "
                         "(k), (v), (dm))\n");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
        n = snprintf(buf + used, cap - used, "#define W_QX(b, h) ((b) * 32 + (h) * 16)\n");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    } else if (ebb_cl_layout_has_qw(l, tu) && l->type != EBB_GGML_Q4_K) { /* a byte a weight */
        n = snprintf(buf + used, cap - used,
                     "#define W_QW8(o, b, k, v0, v1, dm) qw8_raw_%s(w_a + w_off, "
                     "(ulong)(n_in / %u) * %u, (o), (b), (k), (v0), (v1), (dm))\n"
                     "#define W_QX(b, h) ((b) * 32 + (h) * 16)\n",
                     ti->dec, ti->blk, ti->tsize);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    } else if (ebb_cl_layout_has_qw(l, tu)) { /* raw Q4_K: matmul_mms's words only */
        n = snprintf(buf + used, cap - used,
                     "#define W_QW(o, b, k, v, dm) qw_raw_q4_k(w_a + w_off, "
                     "(ulong)(n_in / 256) * 144, (o), (b), (k), (v), (dm))\n"
                     "#define W_QX(b, h) (((b) >> 3) * 256 + (((b) >> 1) & 3) * 64 + "
                     "((b) & 1) * 16 + (h) * 32)\n");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    n = snprintf(buf + used, cap - used,
                 "#define READ_W(o, i) w_pick(READ_W4((o), (i) & ~3), (i) & 3)\n"
                 "#define READ_X4(x, t, i) vload4(0, (x) + (size_t)(t) * x_ld + (i))\n"
                 "#define WRITE_Y(y, t, o, v) ((y)[(size_t)(t) * y_ld + (o)] = (v))\n"
                 "inline float w_pick(float4 v, int k) "
                 "{ return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }\n");
    if (n < 0 || (size_t)n >= cap - used)
        return EBB_ERANGE;
    return EBB_OK;
}

/* Rearranges n_out rows of 32-blocks into the quant plane q and the (d, m) plane s. */
static void split_rows(const struct tinfo *ti, const uint8_t *src, uint64_t n_blocks, uint8_t *q,
                       float *s)
{
    for (uint64_t b = 0; b < n_blocks; b++) {
        const uint8_t *p = src + b * ti->tsize;
        float d = half_to_float(rd16(p));
        if (ti->type == EBB_GGML_Q8_0) {
            memcpy(q + b * 32, p + 2, 32);
            s[2 * b] = d;
            s[2 * b + 1] = 0.0f;
        } else if (ti->type == EBB_GGML_Q4_0) {
            memcpy(q + b * 16, p + 2, 16);
            s[2 * b] = d;
            s[2 * b + 1] = -8.0f * d;
        } else {
            memcpy(q + b * 16, p + 4, 16);
            s[2 * b] = d;
            s[2 * b + 1] = half_to_float(rd16(p + 2));
        }
    }
}

/* A blocking upload. Weights are written this way rather than with CL_MEM_COPY_HOST_PTR, with
 * which a driver may keep its own host copy and upload at first use (NVIDIA: the first
 * evaluation of the 8B shape took ~0.9 s more, and peak RSS held the model twice). */
static ebb_err write_now(struct ebb_cl *cl, cl_mem buf, uint64_t off, uint64_t n, const void *src,
                         struct ebb_diag *diag)
{
    cl_int e = clEnqueueWriteBuffer(cl->q, buf, CL_TRUE, off, n, src, 0, NULL, NULL);
    return ebb_cl_check(e, diag, "uploading a weight");
}

/* split_rows over several threads for large weights (the 8B shape's gate+up is 3.7M blocks):
 * the rearrangement is independent per block. EBB_CL_SPLIT_THREADS caps the count (tests). */
struct split_job {
    const struct tinfo *ti;
    const uint8_t *src;
    uint64_t n_blocks;
    uint8_t *q;
    float *s;
};

static void *split_thread(void *arg)
{
    struct split_job *j = arg;
    split_rows(j->ti, j->src, j->n_blocks, j->q, j->s);
    return NULL;
}

static void split_rows_par(const struct tinfo *ti, const uint8_t *src, uint64_t n_blocks,
                           uint8_t *q, float *s)
{
    enum { MAX_T = 8 };
    uint64_t qb = ti->split == 8 ? 32 : 16;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nc > MAX_T ? MAX_T : nc < 1 ? 1 : (int)nc;
    const char *env = getenv("EBB_CL_SPLIT_THREADS");
    if (env && atoi(env) > 0 && atoi(env) < nt)
        nt = atoi(env);
    uint64_t min_blocks = env ? 1 : (1u << 18);
    if (nt < 2 || n_blocks < min_blocks * 2) {
        split_rows(ti, src, n_blocks, q, s);
        return;
    }
    pthread_t th[MAX_T];
    struct split_job jobs[MAX_T];
    bool started[MAX_T] = {false};
    uint64_t per = (n_blocks + (uint64_t)nt - 1) / (uint64_t)nt;
    for (int i = 0; i < nt; i++) {
        uint64_t b0 = per * (uint64_t)i, b1 = b0 + per < n_blocks ? b0 + per : n_blocks;
        jobs[i] = (struct split_job){ti, src + b0 * ti->tsize, b1 > b0 ? b1 - b0 : 0, q + b0 * qb,
                                     s + b0 * 2};
        if (i > 0 && jobs[i].n_blocks)
            started[i] = pthread_create(&th[i], NULL, split_thread, &jobs[i]) == 0;
    }
    split_thread(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else if (jobs[i].n_blocks)
            split_thread(&jobs[i]); /* the thread could not start: do its part here */
    }
}

static ebb_err make_buf(struct ebb_cl *cl, uint64_t n, void *host, cl_mem *out,
                        struct ebb_diag *diag)
{
    if (n > cl->info.max_alloc)
        return ebb_diag_set(diag, EBB_ENOMEM,
                            "weight plane of %llu bytes exceeds the device's largest buffer "
                            "(%llu bytes)",
                            (unsigned long long)n, (unsigned long long)cl->info.max_alloc);
    cl_int e = CL_SUCCESS;
    *out = clCreateBuffer(cl->ctx, CL_MEM_READ_ONLY, n, NULL, &e);
    ebb_err rc = ebb_cl_check(e, diag, "clCreateBuffer(weight)");
    if (!rc && host)
        rc = write_now(cl, *out, 0, n, host, diag);
    return rc;
}

/* One image2d of n_rows rows of tpr texels of tsize bytes from row-major host texels src,
 * mapped as ebb_cl_image2d_shape says (row o starts at linear texel o * pitch). */
static ebb_err make_image2d(struct ebb_cl *cl, cl_channel_type ct, size_t tsize, uint64_t tpr,
                            uint64_t n_rows, const uint8_t *src, cl_mem *out, uint32_t dims[2],
                            struct ebb_diag *diag)
{
    size_t wm, hm, w, h;
    ebb_cl_image2d_limits(&cl->info, &wm, &hm);
    if (!ebb_cl_image2d_shape(tpr, n_rows, wm, hm, &w, &h))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "weight plane exceeds image2d limits");
    uint64_t pitch = w >= tpr ? tpr : (tpr + w - 1) / w * w;
    uint8_t *img = calloc((size_t)w * h, tsize);
    if (!img)
        return EBB_ENOMEM;
    for (uint64_t o = 0; o < n_rows; o++)
        memcpy(img + o * pitch * tsize, src + o * tpr * tsize, tpr * tsize);
    cl_image_format fmt = {CL_RGBA, ct};
    cl_image_desc desc;
    memset(&desc, 0, sizeof(desc));
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = w;
    desc.image_height = h;
    cl_int e = CL_SUCCESS;
    *out = clCreateImage(cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &fmt, &desc, img, &e);
    free(img);
    dims[0] = (uint32_t)w;
    dims[1] = (uint32_t)h;
    return ebb_cl_check(e, diag, "clCreateImage(image2d weight)");
}

/* The image2d planes of a split weight from its quant plane q and (d, m) plane s. */
static ebb_err place_image2d(struct ebb_cl *cl, const struct tinfo *ti, uint32_t n_in,
                             const uint8_t *q, const float *s, struct ebb_cl_weight *w,
                             struct ebb_diag *diag)
{
    uint64_t tq, ts, nb = n_in / 32;
    i2d_tpr(ti, n_in, &tq, &ts);
    /* (d, m) of blocks 2k and 2k + 1 of a row as four halves; an odd row's last half-texel is
     * zero. */
    uint16_t *sh = calloc((size_t)(ts * w->n_out), 8);
    if (!sh)
        return EBB_ENOMEM;
    for (uint64_t o = 0; o < w->n_out; o++)
        for (uint64_t b = 0; b < nb; b++)
            for (int c = 0; c < 2; c++)
                sh[o * ts * 4 + b * 2 + (uint64_t)c] =
                    float_to_half(s[2 * (o * nb + b) + (uint64_t)c]);
    ebb_err rc = make_image2d(cl, CL_UNSIGNED_INT32, 16, tq, w->n_out, q, &w->a, &w->i2d[0], diag);
    if (!rc)
        rc = make_image2d(cl, CL_HALF_FLOAT, 8, ts, w->n_out, (const uint8_t *)sh, &w->b,
                          &w->i2d[2], diag);
    free(sh);
    if (!rc)
        w->bytes = (uint64_t)w->i2d[0] * w->i2d[1] * 16 + (uint64_t)w->i2d[2] * w->i2d[3] * 8;
    return rc;
}

ebb_err ebb_cl_weight_new(struct ebb_cl *cl, const struct ebb_cl_layout *l, uint32_t n_in,
                          const struct ebb_cl_wsrc *src, size_t n, const struct ebb_cl_hostmap *map,
                          struct ebb_cl_weight *out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    const struct tinfo *ti = tinfo(l->type);
    struct ebb_cl_weight w = {.layout = *l, .n_in = n_in};
    uint8_t *qh = NULL;
    float *sh = NULL;
    char name[64];
    if (!ti || !n_in || n_in % ti->blk || n_in % 4)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "weight of %u columns in layout %s", n_in,
                            ebb_cl_layout_name(l, name, sizeof(name)));
    uint64_t rowb = (uint64_t)n_in / ti->blk * ti->tsize;
    for (size_t i = 0; i < n; i++)
        w.n_out += src[i].n_out;
    uint64_t total = rowb * w.n_out;

    if (l->order == EBB_CL_ORDER_RAW) {
        bool contiguous = map && map->buf;
        const uint8_t *p0 = src[0].data;
        for (size_t i = 0, r = 0; contiguous && i < n; r += src[i].n_out, i++)
            contiguous = (const uint8_t *)src[i].data == p0 + r * rowb;
        if (contiguous && p0 >= map->base && p0 + total <= map->base + map->size) {
            w.a = map->buf;
            clRetainMemObject(w.a);
            w.off = (uint64_t)(p0 - map->base);
            w.zero_copy = true;
            goto done;
        }
        /* A copy: the sources go straight to the device, stacked, without a host copy. */
        if ((rc = make_buf(cl, total, NULL, &w.a, diag)))
            goto out;
        for (size_t i = 0, r = 0; i < n && !rc; r += src[i].n_out, i++)
            rc = write_now(cl, w.a, r * rowb, src[i].n_out * rowb, src[i].data, diag);
        if (rc)
            goto out;
        w.bytes = total;
        goto done;
    }

    if (l->storage == EBB_CL_STORE_IMAGE2D && !ebb_cl_layout_fits(&cl->info, l, n_in, w.n_out)) {
        /* The shape does not fit the image2d limits: the same planes in an image1d_buffer, or
         * in buffers. */
        size_t wm, hm;
        ebb_cl_image2d_limits(&cl->info, &wm, &hm);
        w.layout.storage = EBB_CL_STORE_IMAGE1D;
        if (!ebb_cl_layout_ok(&cl->info, &w.layout, (uint64_t)n_in * w.n_out))
            w.layout.storage = EBB_CL_STORE_BUFFER;
        const char *env = getenv("EBB_CL_LAYOUT");
        if (env && !strcmp(env, "image2d"))
            note_image2d(l->type, w.n_out, n_in, wm, hm,
                         ebb_cl_layout_name(&w.layout, name, sizeof(name)));
    }
    uint64_t nb = (uint64_t)w.n_out * (n_in / 32), qb = ti->split == 8 ? 32 : 16;
    qh = malloc(nb * qb);
    sh = malloc(nb * 2 * sizeof(float));
    if (!qh || !sh) {
        rc = EBB_ENOMEM;
        goto out;
    }
    for (size_t i = 0, r = 0; i < n; r += src[i].n_out, i++)
        split_rows_par(ti, src[i].data, (uint64_t)src[i].n_out * (n_in / 32),
                       qh + r * (n_in / 32) * qb, sh + r * (n_in / 32) * 2);
    if (w.layout.storage == EBB_CL_STORE_IMAGE2D) {
        if ((rc = place_image2d(cl, ti, n_in, qh, sh, &w, diag)))
            goto out;
        goto done;
    }
    if ((rc = make_buf(cl, nb * qb, qh, &w.a, diag)) ||
        (rc = make_buf(cl, nb * 2 * sizeof(float), sh, &w.b, diag)))
        goto out;
    w.bytes = nb * qb + nb * 2 * sizeof(float);
    if (w.layout.storage == EBB_CL_STORE_IMAGE1D) {
        cl_image_format fmt = {CL_RGBA, CL_UNSIGNED_INT32};
        cl_image_desc desc;
        memset(&desc, 0, sizeof(desc));
        desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
        desc.image_width = nb * qb / 16;
        desc.buffer = w.a;
        cl_int e = CL_SUCCESS;
        w.img = clCreateImage(cl->ctx, CL_MEM_READ_ONLY, &fmt, &desc, NULL, &e);
        if ((rc = ebb_cl_check(e, diag, "clCreateImage(image1d_buffer weight)")))
            goto out;
    }
done:
    *out = w;
    memset(&w, 0, sizeof(w));
out:
    ebb_cl_weight_fini(&w);
    free(qh);
    free(sh);
    return rc;
}

uint64_t ebb_cl_weight_read_bytes(const struct ebb_cl_weight *w)
{
    const struct tinfo *ti = tinfo(w->layout.type);
    if (!ti)
        return 0;
    if (w->layout.order == EBB_CL_ORDER_RAW)
        return (uint64_t)w->n_in / ti->blk * ti->tsize * w->n_out;
    /* split: 16 or 32 quant bytes per 32-block, and its (d, m) as floats, or as halves in an
     * image2d */
    uint64_t nb = (uint64_t)w->n_out * (w->n_in / 32), qb = ti->split == 8 ? 32 : 16;
    return nb * (qb + (w->layout.storage == EBB_CL_STORE_IMAGE2D ? 4 : 8));
}

void ebb_cl_weight_fini(struct ebb_cl_weight *w)
{
    if (w->img)
        clReleaseMemObject(w->img);
    if (w->b)
        clReleaseMemObject(w->b);
    if (w->a)
        clReleaseMemObject(w->a);
    memset(w, 0, sizeof(*w));
}

ebb_err ebb_cl_weight_set_args(const struct ebb_cl_weight *w, cl_kernel k, cl_uint first,
                               struct ebb_diag *diag)
{
    cl_int e;
    if (w->layout.order == EBB_CL_ORDER_RAW) {
        cl_ulong off = w->off;
        e = clSetKernelArg(k, first, sizeof(cl_mem), &w->a);
        if (!e)
            e = clSetKernelArg(k, first + 1, sizeof(off), &off);
    } else {
        const cl_mem *q = w->layout.storage == EBB_CL_STORE_IMAGE1D ? &w->img : &w->a;
        e = clSetKernelArg(k, first, sizeof(cl_mem), q);
        if (!e)
            e = clSetKernelArg(k, first + 1, sizeof(cl_mem), &w->b);
    }
    return ebb_cl_check(e, diag, "clSetKernelArg(weight)");
}

ebb_err ebb_cl_wprog_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                           const struct ebb_cl_tuning *tu, struct ebb_cl_wprog *out,
                           struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char pro[2048];
    const char *act = NULL, *half = NULL, *quant = NULL, *mv = NULL, *q8 = NULL, *mma = NULL,
               *kq8 = NULL;
    struct ebb_cl_wprog p = {.layout = *l};
    if ((rc = ebb_cl_layout_prologue(l, tu, pro, sizeof(pro), diag)) ||
        (rc = ebb_cl_source("act.cl", &act, diag)) ||
        (rc = ebb_cl_source("half.cl", &half, diag)) ||
        (rc = ebb_cl_source("quant.cl", &quant, diag)) ||
        (rc = ebb_cl_source("q8.cl", &q8, diag)) || (rc = ebb_cl_source("mma.cl", &mma, diag)) ||
        (rc = ebb_cl_source("matvec.cl", &mv, diag)) || (rc = ebb_cl_source("kq8.cl", &kq8, diag)))
        goto out;
    /* matvec_q8_qin (tuning qin) and the helpers of q8.cl it shares with quantize_x8 */
    uint32_t qin_wg = ebb_cl_layout_has_q16(l, tu) ? ebb_cl_qin_wg(tu) : 0;
    char qdef[96] = "";
    if (qin_wg)
        snprintf(qdef, sizeof(qdef), "#define Q8_QIN 1\n#define QIN_ROWS %u\n#define Q8_WG %u\n",
                 tu->qin_rows, EBB_CL_Q8_WG);
    const char *srcs[] = {pro, qdef, act, half, quant, q8, mma, mv, kq8};
    if ((rc = ebb_cl_program_build(cl, srcs, 9, "-cl-mad-enable", &p.prog, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matvec", &p.matvec, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matmul", &p.matmul, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matmul_coop", &p.matmul_coop, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "matmul_gemm", &p.matmul_gemm, diag)) ||
        (rc = ebb_cl_kernel(p.prog, "get_rows", &p.get_rows, diag)) ||
        (tu->mv_q8 && ebb_cl_layout_has_q16(l, tu) &&
         ((rc = ebb_cl_kernel(p.prog, "matvec_q8", &p.matvec_q8, diag)) ||
          (rc = ebb_cl_kernel(p.prog, "matvec_q8r", &p.matvec_q8r, diag)))) ||
        (tu->mv_q8 && qin_wg &&
         (rc = ebb_cl_kernel(p.prog, "matvec_q8_qin", &p.matvec_q8_qin, diag))) ||
        (ebb_cl_layout_has_kq8(l, tu) &&
         (rc = ebb_cl_kernel(p.prog, "matvec_q8", &p.matvec_q8, diag))) ||
        (tu->mm_mma && ((rc = ebb_cl_kernel(p.prog, "matmul_mma", &p.matmul_mma, diag)) ||
                        (rc = ebb_cl_kernel(p.prog, "matmul_mmb", &p.matmul_mmb, diag)))) ||
        (tu->mm_mma && ebb_cl_layout_has_qw(l, tu) &&
         (rc = ebb_cl_kernel(p.prog, "matmul_mms", &p.matmul_mms, diag))) ||
        (tu->mm_mma && ebb_cl_layout_has_qw(l, tu) && tu->mms_t == 16 &&
         (rc = ebb_cl_kernel(p.prog, "moe_group_mms", &p.moe_group_mms, diag))) ||
        (tu->mv_cpu && ebb_cl_layout_has_deq32(l, tu) &&
         (rc = ebb_cl_kernel(p.prog, "matvec_cpu", &p.matvec_cpu, diag))))
        goto out;
    /* matmul_mms's second tile for the longer products (prefill): the same sources built again
     * with its shape; the kernel keeps its program alive. */
    if (p.matmul_mms && tu->mms_big && tu->mms_big <= tu->mms_max) {
        struct ebb_cl_tuning t2 = *tu;
        t2.mms_t = tu->mmp_t;
        t2.mms_mi = tu->mmp_mi;
        t2.mms_w = tu->mmp_w;
        t2.mms_kb = tu->mmp_kb;
        cl_program p2 = NULL;
        if ((rc = ebb_cl_layout_prologue(l, &t2, pro, sizeof(pro), diag)) ||
            (rc = ebb_cl_program_build(cl, srcs, 9, "-cl-mad-enable", &p2, diag)))
            goto out;
        rc = ebb_cl_kernel(p2, "matmul_mms", &p.matmul_mmp, diag);
        clReleaseProgram(p2);
        if (rc)
            goto out;
    }
    *out = p;
    memset(&p, 0, sizeof(p));
out:
    ebb_cl_wprog_fini(&p);
    if (act)
        ebb_cl_source_release(act);
    if (half)
        ebb_cl_source_release(half);
    if (quant)
        ebb_cl_source_release(quant);
    if (mv)
        ebb_cl_source_release(mv);
    if (q8)
        ebb_cl_source_release(q8);
    if (mma)
        ebb_cl_source_release(mma);
    if (kq8)
        ebb_cl_source_release(kq8);
    return rc;
}

void ebb_cl_wprog_fini(struct ebb_cl_wprog *p)
{
    if (p->matvec)
        clReleaseKernel(p->matvec);
    if (p->matmul)
        clReleaseKernel(p->matmul);
    if (p->matmul_coop)
        clReleaseKernel(p->matmul_coop);
    if (p->matmul_gemm)
        clReleaseKernel(p->matmul_gemm);
    if (p->get_rows)
        clReleaseKernel(p->get_rows);
    if (p->matvec_cpu)
        clReleaseKernel(p->matvec_cpu);
    if (p->matvec_q8)
        clReleaseKernel(p->matvec_q8);
    if (p->matvec_q8r)
        clReleaseKernel(p->matvec_q8r);
    if (p->matvec_q8_qin)
        clReleaseKernel(p->matvec_q8_qin);
    if (p->matmul_mma)
        clReleaseKernel(p->matmul_mma);
    if (p->matmul_mmb)
        clReleaseKernel(p->matmul_mmb);
    if (p->matmul_mms)
        clReleaseKernel(p->matmul_mms);
    if (p->matmul_mmp)
        clReleaseKernel(p->matmul_mmp);
    if (p->moe_group_mms)
        clReleaseKernel(p->moe_group_mms);
    if (p->prog)
        clReleaseProgram(p->prog);
    memset(p, 0, sizeof(p[0]));
}

uint32_t ebb_cl_moe_group_rows(const struct ebb_cl_tuning *tu, uint32_t *wg)
{
    uint32_t mv = tu->mv_wg, n = mv > 1 ? 256 : 64;
    *wg = n;
    if (!mv || mv > n)
        return 0;
    return n / mv * (mv >= 32 ? 4 : mv >= 16 ? 2 : 1);
}

uint32_t ebb_cl_att_wg(const struct ebb_cl_tuning *tu)
{
    return tu->att_wg ? tu->att_wg : tu->norm_wg;
}

ebb_err ebb_cl_moe_mms_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                             const struct ebb_cl_tuning *tu, struct ebb_cl_wprog *out,
                             struct ebb_diag *diag)
{
    struct ebb_cl_tuning t = *tu;
    t.mms_t = 16;
    t.mms_mi = tu->mg_mi;
    t.mms_w = tu->mg_w;
    t.mms_kb = tu->mg_kb;
    t.mms_big = 0;
    return ebb_cl_wprog_build(cl, l, &t, out, diag);
}

uint32_t ebb_cl_att_mma_split(uint32_t head_dim)
{
    if (!head_dim || head_dim % 16)
        return 0;
    if (head_dim <= 128)
        return 1;
    return head_dim % 128 == 0 && head_dim <= 256 ? head_dim / 128 : 0;
}

uint64_t ebb_cl_att_local(const struct ebb_cl_tuning *tu, uint32_t head_dim, uint32_t g)
{
    /* attention.cl's ATT_KL, ATT_VL, ATT_VP, ATT_SCR and ATT_LOCAL, and the rope kernel's key
     * and value halves. */
    uint64_t wg = ebb_cl_att_wg(tu), d4 = head_dim / 4, c = tu->att_chunk, kl = 1;
    if (!tu->mv_cpu && d4 % 4 == 0 && wg % 4 == 0)
        kl = 4;
    else if (!tu->mv_cpu && d4 % 2 == 0 && wg % 2 == 0)
        kl = 2;
    uint64_t vl = d4 < wg ? d4 : wg, vp = wg / vl;
    uint64_t scr_k = kl > 1 ? g * c * kl : 4, scr_v = vp > 1 ? vp * g * head_dim : 4;
    uint64_t floats = g * (head_dim + c + 2 * (c / 4) + 1) + (scr_k > scr_v ? scr_k : scr_v);
    return floats * sizeof(float) + (uint64_t)head_dim * 4;
}

ebb_err ebb_cl_ops_prologue(const struct ebb_cl_tuning *tu, uint32_t head_dim, char *buf,
                            size_t cap, struct ebb_diag *diag)
{
    if (!head_dim || head_dim % 4)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "head dimension %u", head_dim);
    int n = snprintf(buf, cap,
                     "#define NORM_WG %u\n#define ATT_WG %u\n#define HEAD_DIM %u\n"
                     "#define ATT_CHUNK %u\n#define ATT_TQ %u\n#define ATT_TK %u\n"
                     "#define MV_PTX %u\n#define MV_IDP %u\n#define Q8_WG %u\n#define ATT_G %u\n"
                     "#define ATT_MMA %u\n#define MV_CPU %u\n%s",
                     tu->norm_wg, ebb_cl_att_wg(tu), head_dim, tu->att_chunk, tu->att_tq,
                     tu->att_tk, tu->mv_ptx, tu->mv_idp && !tu->mv_ptx ? 1u : 0u, EBB_CL_Q8_WG,
                     tu->att_g > 1 ? tu->att_g : 1u, tu->att_mma && tu->mv_ptx ? 1u : 0u,
                     tu->mv_cpu, tu->mv_q8 ? "#define Q8_QUANTIZE 1\n" : "");
    return n < 0 || (size_t)n >= cap ? EBB_ERANGE : EBB_OK;
}

ebb_err ebb_cl_ops_build(struct ebb_cl *cl, const struct ebb_cl_tuning *tu, uint32_t head_dim,
                         cl_program *out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char pro[512];
    const char *act = NULL, *half = NULL, *ops = NULL, *att = NULL, *q8 = NULL, *mma = NULL;
    if ((rc = ebb_cl_ops_prologue(tu, head_dim, pro, sizeof(pro), diag)))
        return rc;
    if ((rc = ebb_cl_source("act.cl", &act, diag)) ||
        (rc = ebb_cl_source("half.cl", &half, diag)) ||
        (rc = ebb_cl_source("ops.cl", &ops, diag)) ||
        (rc = ebb_cl_source("attention.cl", &att, diag)) ||
        (rc = ebb_cl_source("q8.cl", &q8, diag)) || (rc = ebb_cl_source("mma.cl", &mma, diag)))
        goto out;
    const char *srcs[] = {pro, act, half, ops, mma, att, q8};
    rc = ebb_cl_program_build(cl, srcs, 7, "-cl-mad-enable", out, diag);
out:
    if (act)
        ebb_cl_source_release(act);
    if (half)
        ebb_cl_source_release(half);
    if (mma)
        ebb_cl_source_release(mma);
    if (ops)
        ebb_cl_source_release(ops);
    if (att)
        ebb_cl_source_release(att);
    if (q8)
        ebb_cl_source_release(q8);
    return rc;
}

ebb_err ebb_cl_moe_build(struct ebb_cl *cl, const struct ebb_cl_layout *l,
                         const struct ebb_cl_tuning *tu, cl_program *out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char pro[2048];
    const char *half = NULL, *quant = NULL, *moe = NULL, *q8 = NULL, *kq8 = NULL;
    if ((rc = ebb_cl_layout_prologue(l, tu, pro, sizeof(pro), diag)) ||
        (rc = ebb_cl_source("half.cl", &half, diag)) ||
        (rc = ebb_cl_source("quant.cl", &quant, diag)) ||
        (rc = ebb_cl_source("q8.cl", &q8, diag)) || (rc = ebb_cl_source("kq8.cl", &kq8, diag)) ||
        (rc = ebb_cl_source("moe.cl", &moe, diag)))
        goto out;
    const char *srcs[] = {pro, half, quant, q8, kq8, moe};
    rc = ebb_cl_program_build(cl, srcs, 6, "-cl-mad-enable", out, diag);
out:
    if (q8)
        ebb_cl_source_release(q8);
    if (kq8)
        ebb_cl_source_release(kq8);
    if (half)
        ebb_cl_source_release(half);
    if (quant)
        ebb_cl_source_release(quant);
    if (moe)
        ebb_cl_source_release(moe);
    return rc;
}

void ebb_cl_q8_shape(const struct ebb_cl_tuning *tu, uint32_t n_out, size_t g[2], size_t l[2])
{
    /* (without PTX matvec_q8 shares the matvec's row reduction, so its shape) */
    bool own = tu->mv_ptx && tu->mvq_wg;
    size_t wg = own ? tu->mvq_wg : tu->mv_wg, rows = own ? tu->mvq_rows : tu->mv_rows;
    g[0] = (size_t)n_out * wg, g[1] = 1;
    l[0] = wg * rows, l[1] = 1;
}

uint32_t ebb_cl_qin_wg(const struct ebb_cl_tuning *tu)
{
    /* (the prologue's MVQ_WG) */
    uint32_t wg = tu->mv_ptx && tu->mvq_wg ? tu->mvq_wg : tu->mv_wg;
    uint32_t l = wg * (tu->qin_rows ? tu->qin_rows : 1);
    if (!tu->qin || !tu->mv_q8 || (tu->mv_ptx && l % 32))
        return 0;
    return l;
}

void ebb_cl_qin_shape(const struct ebb_cl_tuning *tu, uint32_t n_out, size_t g[2], size_t l[2])
{
    size_t rows = tu->qin_rows ? tu->qin_rows : 1;
    l[0] = ebb_cl_qin_wg(tu), l[1] = 1;
    g[0] = ((size_t)n_out + rows - 1) / rows * l[0], g[1] = 1;
}

void ebb_cl_qin_local(uint32_t n_in, size_t *xl_bytes, size_t *dl_bytes)
{
    *xl_bytes = n_in;
    *dl_bytes = (size_t)n_in / 32 * 2 * sizeof(float);
}

bool ebb_cl_qin_fits(const struct ebb_cl_tuning *tu, uint64_t local_mem, uint32_t n_in,
                     uint32_t n_out, int glu)
{
    uint32_t l = ebb_cl_qin_wg(tu);
    if (tu->qin_out_max && n_out > tu->qin_out_max)
        return false;
    if (!l || tu->qin < (glu ? 2u : 1u) || !n_in || n_in % 32 ||
        (tu->qin_max && n_in > tu->qin_max))
        return false;
    size_t xl, dl;
    ebb_cl_qin_local(n_in, &xl, &dl);
    /* the kernel's own arrays: the norm's EBB_CL_Q8_WG partials and the rows' sums */
    uint64_t own = (uint64_t)EBB_CL_Q8_WG * 4 + (uint64_t)l * 4;
    return (uint64_t)xl + dl + own <= local_mem;
}

void ebb_cl_wkernel_shape(const struct ebb_cl_tuning *tu, enum ebb_cl_wkernel k, uint32_t n_out,
                          uint32_t nt, size_t g[2], size_t l[2])
{
    size_t by_t = (nt + tu->mm_t - 1) / tu->mm_t;
    switch (k) {
    case EBB_CL_WK_GEMM:
        g[0] = 256 * (size_t)((n_out + 63) / 64), g[1] = (nt + 63) / 64;
        l[0] = 256;
        break;
    case EBB_CL_WK_MMA:
        g[0] = 256 * (size_t)((n_out + tu->mma_r - 1) / tu->mma_r);
        g[1] = (nt + tu->mma_t - 1) / tu->mma_t;
        l[0] = 256;
        break;
    case EBB_CL_WK_MMS:
    case EBB_CL_WK_MMP: {
        bool pf = k == EBB_CL_WK_MMP;
        uint32_t mi = pf ? tu->mmp_mi : tu->mms_mi, tt = pf ? tu->mmp_t : tu->mms_t,
                 w = pf ? tu->mmp_w : tu->mms_w;
        size_t r = 16 * (size_t)(mi ? mi : 1), t = tt ? tt : 32;
        size_t wg = 32 * (size_t)(w ? w : 8);
        g[0] = wg * ((n_out + r - 1) / r), g[1] = (nt + t - 1) / t;
        l[0] = wg;
        break;
    }
    case EBB_CL_WK_MATMUL:
        g[0] = n_out, g[1] = by_t;
        l[0] = tu->mm_wg;
        break;
    case EBB_CL_WK_MVCPU: {
        size_t r = tu->mv_cpu_r ? tu->mv_cpu_r : 4;
        g[0] = (n_out + r - 1) / r, g[1] = nt;
        l[0] = tu->mv_rows;
        break;
    }
    case EBB_CL_WK_COOP:
    case EBB_CL_WK_MATVEC:
        g[0] = (size_t)n_out * tu->mv_wg, g[1] = k == EBB_CL_WK_COOP ? by_t : nt;
        l[0] = (size_t)tu->mv_wg * tu->mv_rows;
        break;
    }
    l[1] = 1;
}

/* A start-up probe's run: builds srcs (options opts), runs kernel kname over g work-items (local
 * size *l, or the driver's choice) with the n_in read-only inputs and then one output buffer of
 * out_bytes as its arguments, and reads that into out. False on any failure (no diagnostics:
 * a probe that fails leaves its path off). */
struct probe_in {
    const void *p;
    size_t n;
};
enum { PROBE_MAX_IN = 3 };
static bool probe_run(struct ebb_cl *cl, const char *const *srcs, size_t n_src, const char *opts,
                      const char *kname, const struct probe_in *in, int n_in, void *out,
                      size_t out_bytes, size_t g, const size_t *l)
{
    cl_program prog = NULL;
    cl_kernel k = NULL;
    cl_mem b[PROBE_MAX_IN + 1] = {NULL};
    struct ebb_cl_arg a[PROBE_MAX_IN + 1];
    bool ok = false;
    cl_int e = CL_SUCCESS;
    if (n_in > PROBE_MAX_IN || ebb_cl_program_build(cl, srcs, n_src, opts, &prog, NULL) ||
        ebb_cl_kernel(prog, kname, &k, NULL))
        goto out;
    for (int i = 0; i < n_in && !e; i++)
        b[i] = clCreateBuffer(cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in[i].n,
                              (void *)in[i].p, &e);
    if (!e)
        b[n_in] = clCreateBuffer(cl->ctx, CL_MEM_WRITE_ONLY, out_bytes, NULL, &e);
    if (e)
        goto out;
    for (int i = 0; i <= n_in; i++)
        a[i] = EBB_CL_ARG(b[i]);
    ok = !ebb_cl_set_args(k, 0, a, (size_t)n_in + 1, NULL) && !ebb_cl_run(cl, k, 1, &g, l, NULL) &&
         !clEnqueueReadBuffer(cl->q, b[n_in], CL_TRUE, 0, out_bytes, out, 0, NULL, NULL);
out:
    for (int i = 0; i <= PROBE_MAX_IN; i++)
        if (b[i])
            clReleaseMemObject(b[i]);
    if (k)
        clReleaseKernel(k);
    if (prog)
        clReleaseProgram(prog);
    return ok;
}

/* IEEE half bits of a small integer (|v| < 2048). */
static uint16_t half_of_int(int v)
{
    if (!v)
        return 0;
    unsigned a = (unsigned)(v < 0 ? -v : v), e = 0;
    while ((a >> e) > 1)
        e++;
    unsigned mant = (a << (10 - e)) & 0x3ffu;
    return (uint16_t)((v < 0 ? 0x8000u : 0u) | ((e + 15) << 10) | mant);
}

bool ebb_cl_mma_probe(struct ebb_cl *cl)
{
    /* A = rows m of k - m / 2 (as halves: small integers, exact), B = columns n of (k + n) % 5;
     * the products and sums are exact in f32 too. */
    uint16_t ah[16 * 16], bh[8 * 16];
    float want[16 * 8], got[16 * 8];
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++)
            ah[m * 16 + k] = half_of_int(k - m / 2);
    for (int n = 0; n < 8; n++)
        for (int k = 0; k < 16; k++)
            bh[n * 16 + k] = half_of_int((k + n) % 5);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++)
                s += (float)(k - m / 2) * (float)((k + n) % 5);
            want[m * 8 + n] = s;
        }
    const char *src = NULL;
    if (ebb_cl_source("mma.cl", &src, NULL))
        return false;
    const char *srcs[] = {"#define MV_PTX 1\n#define MMA_PROBE 1\n", src};
    const struct probe_in in[] = {{ah, sizeof(ah)}, {bh, sizeof(bh)}};
    size_t g = 32;
    bool ok = probe_run(cl, srcs, 2, "", "mma_probe", in, 2, got, sizeof(got), g, &g) &&
              !memcmp(got, want, sizeof(got));
    ebb_cl_source_release(src);
    return ok;
}

bool ebb_cl_idp_probe_with(struct ebb_cl *cl, const char *defs, bool *exact)
{
    if (exact)
        *exact = false;
    /* Byte patterns with every sign and the extremes (-128, 127, 255 unsigned, 0), words from a
     * fixed LCG for the rest, and accumulators of both signs. */
    enum { N = 64 };
    static const uint32_t fixed[][2] = {
        {0x80808080u, 0x80808080u}, {0x7f7f7f7fu, 0x7f7f7f7fu}, {0xffffffffu, 0x80808080u},
        {0xffffffffu, 0x7f7f7f7fu}, {0x80808080u, 0x7f7f7f7fu}, {0x00000000u, 0xffffffffu},
        {0xff7f8001u, 0x807fff01u}, {0x01020304u, 0xfffefdfcu},
    };
    uint32_t a[N], b[N];
    int32_t c[N], want[2 * N + 1], got[2 * N + 1];
    uint32_t r = 12345u;
    for (int i = 0; i < N; i++) {
        if (i < (int)(sizeof(fixed) / sizeof(fixed[0]))) {
            a[i] = fixed[i][0];
            b[i] = fixed[i][1];
        } else {
            a[i] = r = r * 1664525u + 1013904223u;
            b[i] = r = r * 1664525u + 1013904223u;
        }
        c[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? -100000 - i : 70000 + 7 * i;
        int ss = c[i], us = c[i];
        for (int k = 0; k < 4; k++) {
            int ub = (int)((a[i] >> (8 * k)) & 0xffu), vb = (int)((b[i] >> (8 * k)) & 0xffu);
            int sa = ub >= 128 ? ub - 256 : ub, sb = vb >= 128 ? vb - 256 : vb;
            ss += sa * sb;
            us += ub * sb;
        }
        want[2 * i] = ss;
        want[2 * i + 1] = us;
    }
    want[2 * N] = 1; /* MV_IDP */
    const char *src = NULL;
    if (ebb_cl_source("q8.cl", &src, NULL))
        return false;
    /* MV_IDP only where the compiler declares the builtins: otherwise the kernel runs the
     * portable dots (still compared, for *exact) and reports MV_IDP 0, without a build error. */
    const char *srcs[] = {defs ? defs : "",
                          "#if defined(cl_khr_integer_dot_product) || "
                          "defined(__opencl_c_integer_dot_product_input_4x8bit_packed)\n"
                          "#define MV_IDP 1\n#endif\n#define IDP_PROBE 1\n",
                          src};
    const struct probe_in in[] = {{a, sizeof(a)}, {b, sizeof(b)}, {c, sizeof(c)}};
    bool ok = false;
    if (probe_run(cl, srcs, 3, "-cl-mad-enable", "idp_probe", in, 3, got, sizeof(got), N, NULL)) {
        if (exact)
            *exact = !memcmp(got, want, 2 * N * sizeof(got[0]));
        ok = !memcmp(got, want, sizeof(got));
    }
    ebb_cl_source_release(src);
    return ok;
}

bool ebb_cl_idp_probe(struct ebb_cl *cl, bool *exact)
{
    return ebb_cl_idp_probe_with(cl, NULL, exact);
}
