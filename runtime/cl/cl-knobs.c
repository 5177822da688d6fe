/* Tuning: the kernel variants and shapes chosen from the device's properties, and their
 * overrides from the environment. */
#include "cl-int.h"

#include <stdlib.h>
#include <string.h>

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
