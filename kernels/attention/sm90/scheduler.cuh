// sm90/scheduler.cuh — the work order of the flash3 kernels: which work tile a block (forward) or
// which K/V tile a block (backward) takes, and in what order. The host-side choices (head-major
// or row-major, the pair group) are CUDA-free in flash3_tiles.h, with their measurements.
//
// Forward (flash3.cu): a persistent grid, one block per SM, over the work tiles (Q tile i of Br
// rows, batch b, head h), longest first:
//   row-major   the longest rows of every head first (i = Tr - 1 for all heads, then Tr - 2, ...),
//               while the K/V of all heads fit L2;
//   head-major  one head at a time, its longest rows first, once they outgrow L2 (so the ~132
//               tiles running at once read one head's K/V tiles within a few steps of each other).
//   static      block k takes tiles k, k + grid, ... (the ring's pairs, which pass no scratch);
//   dynamic     the producer takes the next tile from an atomic counter (the whole-sequence
//               forward: +6..+12% over static on an H100, which hands each block a fixed share of
//               the longest-first list).
// Row tiles end at Tq (tile i starts at Tq - (Tr - i) Br): a ragged tile is the first, the
// shortest row, whose rows < 0 compute on zero-filled Q rows (TMA reads negative rows as 0) and
// are never stored. (Tiles from row 0 would leave the ragged tile last, the longest: at HS 64,
// T 4096 = 21 x 192 + 64, two of its three warpgroups would idle through all 32 K/V tiles.)
//
// Backward (flash3_bwd.cu): one block per (K/V tile j, batch b, kv head), a 1-D grid in groups of
// `group` (b, kv head) pairs, one group after another, each group's blocks in order of j (its
// pairs inside): the blocks of a pair share their Q_i, dO_i and dQacc rows in L2, so a group
// that fits one wave reads them together (flash3_tiles.h bwd_pair_group). Block j of a pair
// comes after block j - 1 of the same pair, as the fixed dQ order needs.
#pragma once

namespace flash3 {

// One forward work tile: batch b, query head h (on kv head kvh), first query row q0 (< 0 for
// the ragged first tile), n_kv K/V tiles to visit (from the diagonal, right to left).
struct FwdWork {
  int b, h, kvh, q0, n_kv;
};

template <int Br, int Bc>
struct FwdScheduler {
  int Tq, Tk, NH, NKV, Tr, BH, n_work, head_major;
  bool causal;  // key s visible to query t iff s <= t (Tq == Tk); else all Tk keys (a ring pair)
  __device__ __forceinline__ FwdScheduler(int B, int NH_, int NKV_, int Tq_, int Tk_,
                                          int head_major_, bool causal_)
      : Tq(Tq_), Tk(Tk_), NH(NH_), NKV(NKV_), Tr((Tq_ + Br - 1) / Br), BH(B * NH_),
        n_work(Tr * BH), head_major(head_major_), causal(causal_) {}
  // Work tile w (0 .. n_work - 1, handed out in order) -> (Q tile i, sequence-head bh).
  __device__ __forceinline__ void tile_index(int w, int& i, int& bh) const {
    if (head_major) {
      bh = w / Tr;
      i = Tr - 1 - w % Tr;
    } else {
      i = Tr - 1 - w / BH;
      bh = w % BH;
    }
  }
  // Work tile i covers query rows q0 = Tq - (Tr - i) Br .. q0 + Br - 1.
  __device__ __forceinline__ int first_row(int i) const { return Tq - (Tr - i) * Br; }
  // K/V tiles of a work tile's rows from q0: causal, up to the diagonal (tiles right of it are
  // never loaded); a full pair, all of Tk.
  __device__ __forceinline__ int kv_tiles(int q0) const {
    return ((causal ? min(q0 + Br, Tq) : Tk) + Bc - 1) / Bc;
  }
  __device__ __forceinline__ FwdWork work(int w) const {
    int i, bh;
    tile_index(w, i, bh);
    FwdWork t;
    t.b = bh / NH;
    t.h = bh % NH;
    t.kvh = t.h / (NH / NKV);
    t.q0 = first_row(i);
    t.n_kv = kv_tiles(t.q0);
    return t;
  }
  // This block's first work tile, and the one after w: DYNAMIC, from the counter (zeroed before
  // the launch; the first grid tiles are the blocks' own), else the static stride.
  __device__ __forceinline__ int first() const { return blockIdx.x; }
  template <bool DYNAMIC>
  __device__ __forceinline__ int next(int w, int* counter) const {
    if constexpr (DYNAMIC)
      return gridDim.x + atomicAdd(counter, 1);
    else
      return w + gridDim.x;
  }
};

// Backward block L of the 1-D grid in groups of `group` (b, kv head) pairs -> its pair (b NKV +
// kv head) and K/V tile j; n_j K/V tiles per pair.
__device__ __forceinline__ void bwd_pair_group_block(int L, int pairs, int n_j, int group,
                                                     int& pair, int& j) {
  const int first = L / (group * n_j) * group;
  const int size = min(group, pairs - first), r = L - first * n_j;
  pair = first + r % size;
  j = r / size;
}

}  // namespace flash3
