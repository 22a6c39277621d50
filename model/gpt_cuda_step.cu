// gpt_cuda_step.cu — a training step of the CUDA model (the class: gpt_cuda_impl.cuh; its
// construction, memory and generation: gpt_cuda.cu): each layer's forward, the chunked
// classifier, the backward with recomputation, the grad norm and AdamW.
//
// Forward, N = B*T (as gpt_cpu.cpp; attention from the backend chosen by ModelOptions.attn):
//   encoded = wte[inp] + wpe   (RoPE models: wte[inp] only)         encoder_forward
//   per layer (block_forward): ln1 -> qkv (bias epilogue) -> [RoPE on Q, K in place]
//              -> attention
//              -> residual2 = residual + attproj(atty)   (bias epilogue, residual as C, beta = 1)
//              -> ln2 -> fc with GELU epilogue (stores pre-GELU fch and fch_gelu)
//              -> residual3 = residual2 + fcproj(fch_gelu)   (likewise)
//   (one rounding to floatX per fused product where the CPU model rounds nothing: fp32)
//   lnf -> chunked classifier
// Classifier (with targets), in chunks of ModelOptions.classifier_chunk rows (8192: 0.8 GB of
// logits at Vp = 50304) so that B x T x Vp logits never exist: per chunk logits = lnf @ wte^T,
// the fused classifier writes losses and dlogits for dloss = 1/N in place, and the lm head's
// backward for those rows runs at once: d(lnf) into dl_btc, d(wte) summed into an fp32
// (Vp, C) buffer. backward(loss_scale) adds loss_scale x that buffer to the wte gradient and
// scales d(lnf) (one elementwise pass each), then goes on. So the logits are made once and
// used while they are in memory (llm.c's order); the price is 154 MB for the d(wte) buffer at
// d12 and one extra rounding of d(lnf) when loss_scale is not 1. Without targets no logits are
// made at all: logits_at() computes its row from the saved lnf (one 1 x C x Vp product).
// Masks (ModelOptions.mask, kernels/attention/mask.h): forward() makes the batch's mask once,
// before the first layer: the document starts (b_.doc_start) by document_starts_gpu from the
// input tokens on the device, or with --cp on the host from the whole batch (the ring plans
// which chunk pairs to compute from them) and copied up; every attention call of the step
// (forward, backward, recomputation) gets that mask.
// Backward mirrors gpt_cpu.cpp: one residual-stream gradient (dresidual, floatX) accumulated
// by the LayerNorm backwards; per-layer temporaries dl_btc (N, C) and dl_bt4c (N, 4C), the
// latter reused for dqkv (RoPE: rotated back in place before the qkv product). The GELU
// backward is fused into the fcproj dinp product (DGELU epilogue). Bias gradients come from a
// deterministic reduction kernel (matmul.cuh).
// Recompute (ModelOptions.recompute): gelu keeps one fch_gelu buffer and recomputes it from
// fch with the elementwise kernel before each layer's backward (saves L-1 of L x N x 4C);
// layer keeps only residual3 (each block's output = the next block's input) per layer, every
// other activation and attention's saved state one layer deep, and re-runs block l's forward
// before layer l's backward (recompute(): all but the fcproj product, whose output residual3[l]
// is kept; the last layer's buffers still hold its forward: not re-run). layer-but-attn keeps
// atty and attention's saved state (LSE) for every layer too, and recompute() re-runs the same
// parts but attention: attention's backward reads the kept atty and LSE, and the forward runs
// once. Per layer kept: 16 N x C floatX + 4 N fp32 (none), 12 N x C + 4 N (gelu), 2 N x C
// (layer-but-attn), N x C (layer), plus attention's saved state in all but layer.
// Optimizer step: the norm (global_norm_squared), its copy to the host, then one AdamW launch
// over every tensor that takes the clip scale from the norm on the device; the host waits for
// the copy only. CUDA graphs (ModelOptions.cuda_graphs, run_captured): the forward with targets
// and the backward each replay as one graph from their second call of a shape, the same bits
// as launching each kernel; on an H100, d12 +0.6% at B 32 x T 1024, +9-10% at B 4 x T 256 and
// B 1 x T 1024 (bench/results/training-step/).
//
// Measured before the long-context changes (H200, bf16, d12, B=32, T=1024, --attn naive; the
// step that `flashgpt bench-kernels --only step` now times): 69.1 ms per step (forward + loss
// 25.8, backward 42.1, grad norm + AdamW 1.3), 474k tokens/s; plan 24.33 GiB, measured peak
// 24.40 GiB. After them, at 128K tokens on an H100: bench/results/long-context/.
#include "model/dist_comm.h"
#include "model/gpt_cuda_impl.cuh"

namespace gpt_cuda {

// ModelOptions.cuda_graphs (gpt_cuda_impl.cuh): body() eagerly on the first call of a shape,
// captured on the second, replayed from then on. ThreadLocal capture mode: a call in body() that
// is not capturable (a synchronizing one) fails the capture instead of running outside it.
template <class Body>
void GptCuda::run_captured(CapturedCall& g, int B, int T, float loss_scale, Body&& body) {
  if (!cuda_graphs_) {
    body();
    return;
  }
  if (g.B != B || g.T != T || g.loss_scale != loss_scale) {
    drop_graph(g);
    g.B = B;
    g.T = T;
    g.loss_scale = loss_scale;
  }
  if (g.calls++ == 0) {
    body();
    return;
  }
  if (!g.exec) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      body();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    const cudaError_t err = cudaGraphInstantiate(&g.exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(err);
  }
  CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
  graph_launches_++;
}

void GptCuda::drop_graph(CapturedCall& g) {
  if (g.exec) cudaGraphExecDestroy(g.exec);
  g = CapturedCall{};
}

GptCuda::LayerActs GptCuda::acts(int l) const {
  const size_t NC = maxN() * cfg_.channels, NQKV = maxN() * cfg_.qkv_channels(), Nrows = maxN();
  // Slot l of a buffer kept for every layer, slot 0 of a one-layer one.
  const int k = plan_.layers_kept == 1 ? 0 : l, ka = plan_.attn_layers_kept == 1 ? 0 : l,
            g = plan_.fch_gelu_layers == 1 ? 0 : l;
  LayerActs a;
  a.residual = l == 0 ? b_.encoded : b_.residual3 + (l - 1) * NC;
  a.ln1 = b_.ln1 + k * NC;
  a.ln1_mean = b_.ln1_mean + k * Nrows;
  a.ln1_rstd = b_.ln1_rstd + k * Nrows;
  a.qkv = b_.qkv + k * NQKV;
  a.atty = b_.atty + ka * NC;
  a.att_saved = b_.att_saved + ka * plan_.att_saved_per_layer;
  a.residual2 = b_.residual2 + k * NC;
  a.ln2 = b_.ln2 + k * NC;
  a.ln2_mean = b_.ln2_mean + k * Nrows;
  a.ln2_rstd = b_.ln2_rstd + k * Nrows;
  a.fch = b_.fch + k * 4 * NC;
  a.fch_gelu = b_.fch_gelu + g * 4 * NC;
  a.residual3 = b_.residual3 + l * NC;
  return a;
}

double GptCuda::attention_ms() { return att_timer_ ? att_timer_->take_ms() : -1.0; }

void GptCuda::block_forward(int l, int B, int T, int decode_pos) {
  block_qkv(l, B, T, decode_pos);
  block_attention(l, B, T, decode_pos);
  block_after_attention(l, B * T, true);
}

void GptCuda::block_qkv(int l, int B, int T, int decode_pos) {
  const int C = cfg_.channels, QKV = cfg_.qkv_channels(), NH = cfg_.num_heads,
            NKV = cfg_.num_kv_heads, HS = cfg_.head_size();
  const int N = B * T;
  const LayerActs a = acts(l);
  cudaStream_t st = stream_;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, param(P_LN1W) + l * C,
                    param(P_LN1B) + l * C, N, C, st);
  matmul_forward(a.qkv, a.ln1, param(P_QKVW) + (size_t)l * QKV * C, param(P_QKVB) + l * QKV, N, C,
                 QKV, st);
  if (cfg_.rope) {
    if (decode_pos >= 0)  // decode()'s one row of cos/sin is its position's
      rope_forward(a.qkv, b_.rope_decode, B, T, NH, NKV, HS, 0, st);
    else
      rope(a.qkv, false, B, T);
  }
  // Keys and values (after RoPE) into the cache rows of their positions (kv_cache.h): K at
  // qkv + NH*HS, V at + (NH+NKV)*HS of each row.
  if (decode_pos >= 0 || kv_fill_) {
    const size_t es = sizeof(floatX), kv_row = (size_t)NKV * HS;
    kv_.for_each_store(decode_pos >= 0 ? decode_pos : 0, T, [&](int row, int offset, int len) {
      const floatX* src = a.qkv + (size_t)offset * QKV;
      CUDA_CHECK(cudaMemcpy2DAsync(k_cache(l) + row * kv_row, kv_row * es, src + (size_t)NH * HS,
                                   (size_t)QKV * es, kv_row * es, len, cudaMemcpyDeviceToDevice, st));
      CUDA_CHECK(cudaMemcpy2DAsync(v_cache(l) + row * kv_row, kv_row * es,
                                   src + (size_t)(NH + NKV) * HS, (size_t)QKV * es, kv_row * es,
                                   len, cudaMemcpyDeviceToDevice, st));
    });
  }
}

void GptCuda::block_attention(int l, int B, int T, int decode_pos) {
  const LayerActs a = acts(l);
  attention_timer(true);
  if (decode_pos >= 0) {
    const KvCache::Keys keys = kv_.visible();
    attention_decode_ring(a.atty, a.qkv, k_cache(l), v_cache(l), keys.n, keys.first, kv_.slots(),
                          cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size(), b_.decode_scratch,
                          stream_);
  } else if (ring_) {
    ring_->forward(*attn_, a.atty, static_cast<float*>(static_cast<void*>(a.att_saved)), a.qkv,
                   shape(B, T), ring_bufs_, stream_);
  } else {
    AttnForwardArgs fa{a.atty, a.att_saved, b_.att_scratch, a.qkv, shape(B, T)};
    fa.mask = mask_;
    attn_->forward(fa, stream_);
  }
  attention_timer(false);
}

void GptCuda::block_after_attention(int l, int N, bool write_residual3) {
  const int C = cfg_.channels;
  const LayerActs a = acts(l);
  cudaStream_t st = stream_;
  matmul_forward_residual(a.residual2, a.atty, param(P_ATTPROJW) + (size_t)l * C * C,
                          param(P_ATTPROJB) + l * C, a.residual, N, C, C, st);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(P_LN2W) + l * C,
                    param(P_LN2B) + l * C, N, C, st);
  matmul_forward_gelu(a.fch_gelu, a.fch, a.ln2, param(P_FCW) + (size_t)l * 4 * C * C,
                      param(P_FCB) + l * 4 * C, N, C, 4 * C, st);
  if (!write_residual3) return;
  matmul_forward_residual(a.residual3, a.fch_gelu, param(P_FCPROJW) + (size_t)l * C * 4 * C,
                          param(P_FCPROJB) + l * C, a.residual2, N, 4 * C, C, st);
}

// Before layer l's backward: remake what the recompute mode holds one layer deep (the plan's
// depths, model/recompute.h's table). The last layer's one-layer buffers still hold its forward.
void GptCuda::recompute(int l, int B, int T) {
  const int L = cfg_.num_layers;
  if (l == L - 1) return;
  if (plan_.layers_kept < L) {
    block_qkv(l, B, T, -1);
    if (plan_.attn_layers_kept < L) block_attention(l, B, T, -1);  // else atty[l], LSE[l] kept
    block_after_attention(l, B * T, false);  // residual3[l], the next block's input, is kept
  } else if (plan_.fch_gelu_layers < L) {
    const LayerActs a = acts(l);
    gelu_forward(a.fch_gelu, a.fch, (size_t)B * T * 4 * cfg_.channels, stream_);
  }
}

void GptCuda::encode(int B, int T) {
  const int C = cfg_.channels;
  if (cfg_.rope || !cp_) {
    encoder_forward(b_.encoded, b_.inputs, param(P_WTE), cfg_.rope ? nullptr : param(P_WPE), B, T,
                    C, stream_);
    return;
  }
  for_each_run(B, T, [&](size_t r0, int pos0, int len) {
    encoder_forward(b_.encoded + r0 * C, b_.inputs + r0, param(P_WTE),
                    param(P_WPE) + (size_t)pos0 * C, 1, len, C, stream_);
  });
}

void GptCuda::rope(floatX* x, bool backward, int B, int T) {
  const int NH = cfg_.num_heads, NKV = cfg_.num_kv_heads, HS = cfg_.head_size();
  if (!cp_) {
    (backward ? rope_backward : rope_forward)(x, b_.rope_table, B, T, NH, NKV, HS, 0, stream_);
    return;
  }
  const size_t QKV = cfg_.qkv_channels();
  for_each_run(B, T, [&](size_t r0, int pos0, int len) {
    (backward ? rope_backward : rope_forward)(x + r0 * QKV, b_.rope_table, 1, len, NH, NKV, HS,
                                              pos0, stream_);
  });
}

float GptCuda::forward(const int* inputs, const int* targets, int B, int T) {
  const int Tseq = T;  // the caller's sequence length; with cp this rank holds Tl of its rows
  if (cp_) {
    CHECK(T == cp_->T(), "context parallel: this model splits sequences of --seq-len %d; got %d",
          cp_->T(), T);
    T = cp_->local_len(cp_rank_);
  }
  CHECK(B >= 1 && B <= maxB_ && T >= 1 && T <= maxT_,
        "batch %dx%d exceeds the model's allocation %dx%d", B, T, maxB_, maxT_);
  const int C = cfg_.channels, L = cfg_.num_layers, V = cfg_.vocab_size,
            Vp = cfg_.padded_vocab_size;
  const int N = B * T;
  const size_t NC = maxN() * C;
  for (int i = 0; i < B * Tseq; i++)
    CHECK(inputs[i] >= 0 && inputs[i] < V, "token id %d at position %d is outside the vocabulary "
          "(%d); the data does not match the model's tokenizer", inputs[i], i, V);
  if (targets)
    for (int i = 0; i < B * Tseq; i++)
      CHECK(targets[i] >= 0 && targets[i] < V, "target id %d is outside the vocabulary (%d)",
            targets[i], V);
  attach();
  // The staging buffer may still feed the previous forward's copy. With cp it takes this
  // rank's zigzag rows of the (B, Tseq) batch.
  CUDA_CHECK(cudaEventSynchronize(inputs_copied_));
  auto stage = [&](int* dst, const int* src) {
    if (cp_) cp_scatter<int>(dst, src, *cp_, cp_rank_, B, 1);
    else std::memcpy(dst, src, N * sizeof(int));
  };
  stage(h_tokens_, inputs);
  if (targets) stage(h_tokens_ + maxN(), targets);
  CUDA_CHECK(cudaMemcpyAsync(b_.inputs, h_tokens_, N * sizeof(int), cudaMemcpyHostToDevice, stream_));
  if (targets)
    CUDA_CHECK(cudaMemcpyAsync(b_.targets, h_tokens_ + maxN(), N * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(inputs_copied_, stream_));
  B_ = B;
  T_ = T;
  have_targets_ = targets != nullptr;
  make_mask(inputs, B, Tseq);
  cudaStream_t st = stream_;

  // From the embedding to the mean loss's copy to the host: one CUDA graph when cuda_graphs_.
  auto body = [&] {
    encode(B, T);
    for (int l = 0; l < L; l++) block_forward(l, B, T, -1);
    layernorm_forward(b_.lnf, b_.lnf_mean, b_.lnf_rstd, b_.residual3 + (L - 1) * NC, param(P_LNFW),
                      param(P_LNFB), N, C, st);
    // Without targets no logits are made here: logits_at() computes the row it is asked for.
    if (!have_targets_) return;
    // The classifier, chunk by chunk so that (N, Vp) logits never exist at once. Per chunk of
    // rows: logits = lnf @ wte^T; losses, and dlogits for d(mean loss) = 1/N in place; then at
    // once the lm head's backward for those rows: d(lnf) into b_.dl_btc and d(wte) accumulated in
    // b_.dwte_chunk (fp32). backward() scales both by its loss_scale (the loss scale is not known
    // yet), so the logits are used while they are in memory and never recomputed.
    CUDA_CHECK(cudaMemsetAsync(b_.dwte_chunk, 0, (size_t)Vp * C * sizeof(float), st));
    // d(loss)/d(token loss): 1/N, or with cp cp/(B*T_seq) (context_parallel.h: the gradient
    // all-reduce averages over the dp x cp ranks, which gives back the sum over the sequence).
    const float dloss = cp_ ? cp_token_dloss(cp_->cp(), B, cp_->T(), 1) : 1.0f / N;
    float* ks = reinterpret_cast<float*>(b_.kscratch);
    for (int r0 = 0; r0 < N; r0 += plan_.chunk_rows) {
      const int n = std::min(plan_.chunk_rows, N - r0);
      const floatX* lnf = b_.lnf + (size_t)r0 * C;
      matmul_forward(b_.logits, lnf, param(P_WTE), nullptr, n, C, Vp, st);
      classifier(b_.losses + r0, b_.logits, b_.logits, b_.targets + r0, dloss, n, V, Vp, st);
      matmul_backward(b_.dl_btc + (size_t)r0 * C, b_.dwte_chunk, nullptr, b_.logits, lnf,
                      param(P_WTE), n, C, Vp, ks, st);
    }
    mean_loss(b_.loss_mean, b_.losses, N, st);
    CUDA_CHECK(cudaMemcpyAsync(h_loss_, b_.loss_mean, sizeof(float), cudaMemcpyDeviceToHost, st));
  };
  if (have_targets_ && !kv_fill_) run_captured(fwd_graph_, B, T, 0.0f, body);
  else body();
  if (!have_targets_) return 0.0f;
  sync();
  measure();
  if (!cp_) return *h_loss_;
  // The sequence's mean over all B*T tokens: this rank's share, averaged over the ranks (each
  // dp group's cp ranks hold one set of sequences: their mean is the dp mean of the sequence
  // means, which every rank returns).
  const double sum = (double)*h_loss_ * N;
  return world_comm_->all_reduce_mean((float)cp_loss_share(sum, cp_->cp(), B, cp_->T()));
}

void GptCuda::make_mask(const int* inputs, int B, int Tseq) {
  mask_ = AttnMask{nullptr, mask_spec_.window};
  if (mask_spec_.kind != MaskKind::kDocument) {
    if (ring_) ring_->set_mask(mask_, mask_, B);
    return;
  }
  const int eot = mask_spec_.eot_token(cfg_.vocab_size);
  const size_t bytes = (size_t)B * Tseq * sizeof(int);
  if (ring_) {  // every rank the whole sequence's starts, on the host too (the ring's plan)
    host_doc_start_ = document_starts(inputs, B, Tseq, eot);
    CUDA_CHECK(cudaMemcpyAsync(b_.doc_start, host_doc_start_.data(), bytes,
                               cudaMemcpyHostToDevice, stream_));  // pageable: staged at return
  } else {
    document_starts_gpu(b_.doc_start, b_.inputs, B, Tseq, eot, stream_);
  }
  mask_.doc_start = b_.doc_start;
  if (ring_) ring_->set_mask(mask_, AttnMask{host_doc_start_.data(), mask_spec_.window}, B);
}

void GptCuda::backward(float loss_scale) {
  CHECK(have_targets_, "backward() needs a forward() with targets first");
  const int B = B_, T = T_, N = B * T, C = cfg_.channels, L = cfg_.num_layers,
            Vp = cfg_.padded_vocab_size, QKV = cfg_.qkv_channels();
  const size_t NC = maxN() * C;
  const AttnShape s = shape(B, T);
  cudaStream_t st = stream_;
  float* ks = reinterpret_cast<float*>(b_.kscratch);
  const bool overlap = comm_->begin_backward();  // all-reduce layer by layer as they finish
  CHECK(encoder_backward_scratch_bytes(B, T, encoder_sort_temp_bytes(B, T)) <=
            plan_.buffers[kBuf_kscratch].bytes,
        "internal: encoder scratch for %dx%d exceeds the plan", B, T);
  attach();

  // All of it one CUDA graph when cuda_graphs_ (one process: no all-reduce overlapped).
  auto body = [&] {
    // The lm head's gradients were made in the forward for d(mean loss): scale them now.
    scale_add(grad(P_WTE), b_.dwte_chunk, loss_scale, (size_t)Vp * C, st);
    if (loss_scale != 1.0f) scale_floatX(b_.dl_btc, loss_scale, (size_t)N * C, st);
    CUDA_CHECK(cudaMemsetAsync(b_.dresidual, 0, (size_t)N * C * sizeof(floatX), st));
    layernorm_backward(b_.dresidual, grad(P_LNFW), grad(P_LNFB), b_.dl_btc,
                       b_.residual3 + (L - 1) * NC, param(P_LNFW), b_.lnf_mean, b_.lnf_rstd, N, C,
                       ks, st);
    // Each product's weight gradient (dweight, dbias) is off the critical path: it runs on
    // wgrad_stream_ from when its dout is ready (fork) until the chain is about to overwrite its
    // dout or input (join). Only the chain writes the shared buffers; every gradient tensor has
    // one writer, so the bits are those of one stream.
    cudaStream_t ws = wgrad_stream_;
    float* wks = reinterpret_cast<float*>(b_.wgrad_scratch);
    for (int l = L - 1; l >= 0; l--) {
      recompute(l, B, T);
      const LayerActs a = acts(l);
      // dresidual holds d(residual3[l]); residual3 = residual2 + fcproj passes it to both.
      wgrad_fork(0);
      matmul_backward_dweight(grad(P_FCPROJW) + (size_t)l * C * 4 * C, grad(P_FCPROJB) + l * C,
                              b_.dresidual, a.fch_gelu, N, 4 * C, C, wks, ws);
      wgrad_done(0);
      // d(fch) = (dresidual @ fcprojw) * gelu'(fch): the GELU backward rides in the epilogue.
      matmul_backward_dinp(b_.dl_bt4c, b_.dresidual, param(P_FCPROJW) + (size_t)l * C * 4 * C, N,
                           4 * C, C, st, 1.0f, a.fch);
      wgrad_fork(1);
      matmul_backward_dweight(grad(P_FCW) + (size_t)l * 4 * C * C, grad(P_FCB) + l * 4 * C,
                              b_.dl_bt4c, a.ln2, N, C, 4 * C, wks, ws);
      wgrad_done(1);
      matmul_backward_dinp(b_.dl_btc, b_.dl_bt4c, param(P_FCW) + (size_t)l * 4 * C * C, N, C,
                           4 * C, st);
      // dresidual += ln2 path: now d(residual2[l])
      wgrad_join(0);
      layernorm_backward(b_.dresidual, grad(P_LN2W) + l * C, grad(P_LN2B) + l * C, b_.dl_btc,
                         a.residual2, param(P_LN2W) + l * C, a.ln2_mean, a.ln2_rstd, N, C, ks, st);
      wgrad_fork(2);
      matmul_backward_dweight(grad(P_ATTPROJW) + (size_t)l * C * C, grad(P_ATTPROJB) + l * C,
                              b_.dresidual, a.atty, N, C, C, wks, ws);
      wgrad_done(2);
      matmul_backward_dinp(b_.dl_btc, b_.dresidual, param(P_ATTPROJW) + (size_t)l * C * C, N, C,
                           C, st);
      floatX* dqkv = b_.dl_bt4c;
      wgrad_join(1);
      attention_timer(true);
      if (ring_) {
        ring_->backward(*attn_, dqkv, b_.att_scratch, b_.dl_btc, a.qkv, a.atty,
                        static_cast<const float*>(static_cast<const void*>(a.att_saved)), s,
                        ring_bufs_, st);
      } else {
        AttnBackwardArgs ba{dqkv,   b_.att_scratch, b_.dl_btc,     a.qkv,
                            a.atty, a.att_saved,    s,             deterministic_};
        ba.mask = mask_;
        attn_->backward(ba, st);
      }
      attention_timer(false);
      // qkv holds rotated Q, K: take dQ, dK back through the rotation.
      if (cfg_.rope) rope(dqkv, true, B, T);
      wgrad_fork(3);
      matmul_backward_dweight(grad(P_QKVW) + (size_t)l * QKV * C, grad(P_QKVB) + l * QKV, dqkv,
                              a.ln1, N, C, QKV, wks, ws);
      wgrad_done(3);
      matmul_backward_dinp(b_.dl_btc, dqkv, param(P_QKVW) + (size_t)l * QKV * C, N, C, QKV, st);
      // dresidual += ln1 path: d(residual3[l-1]) (or d(encoded) for l = 0)
      wgrad_join(2);
      layernorm_backward(b_.dresidual, grad(P_LN1W) + l * C, grad(P_LN1B) + l * C, b_.dl_btc,
                         a.residual, param(P_LN1W) + l * C, a.ln1_mean, a.ln1_rstd, N, C, ks, st);
      // The next layer's recompute and products overwrite ln1 and dqkv; layer l is complete.
      wgrad_join(3);
      if (overlap) comm_->layer_done(l);  // layer l's gradients are final
    }
    if (cfg_.rope || !cp_) {
      encoder_backward(grad(P_WTE), cfg_.rope ? nullptr : grad(P_WPE), b_.dresidual, b_.inputs, B,
                       T, C, b_.kscratch, st);
    } else {  // wpe's rows at this rank's global positions, one chunk at a time
      for_each_run(B, T, [&](size_t r0, int pos0, int len) {
        encoder_backward(grad(P_WTE), grad(P_WPE) + (size_t)pos0 * C, b_.dresidual + r0 * C,
                         b_.inputs + r0, 1, len, C, b_.kscratch, st);
      });
    }
  };
  if (!overlap) run_captured(bwd_graph_, B, T, loss_scale, body);
  else body();
  if (overlap) comm_->backward_done();
  have_targets_ = false;
}

void GptCuda::zero_grad() {
  CUDA_CHECK(cudaMemsetAsync(b_.grads, 0, comm_->params_alloc() * sizeof(float), stream_));
}

// Sum of squares of what this rank holds averaged (all of it, or its ZeRO-1 slice, whose
// padding holds zeros), summed over the ranks with ZeRO-1, then copied to h_norm_.
void GptCuda::queue_grad_norm() {
  global_norm_squared(b_.norm, b_.grads + comm_->norm_begin(), comm_->norm_count(),
                      reinterpret_cast<double*>(b_.kscratch), stream_);
  comm_->sum_norm(b_.norm);
  CUDA_CHECK(cudaMemcpyAsync(h_norm_, b_.norm, sizeof(double), cudaMemcpyDeviceToHost, stream_));
}

float GptCuda::grad_norm() {
  queue_grad_norm();
  sync();
  return grad_norm_from_squared(*h_norm_);
}

float GptCuda::optimizer_step(const AdamWHyper& h, float clip, int step) {
  // The norm, copied to the host; AdamW is queued behind it and takes the clip scale from the
  // device, so the host waits for the copy while the GPU goes on.
  queue_grad_norm();
  CUDA_CHECK(cudaEventRecord(norm_copied_, stream_));
  std::vector<AdamWPiece> pieces;  // tensors, or this rank's ZeRO-1 pieces of them
  for (const GradComm::UpdateRange& r : comm_->update_ranges())
    pieces.push_back(AdamWPiece{r.begin, r.count, r.opt_offset,
                                ParamLayout::decayed(r.tensor) ? h.weight_decay : 0.0f});
  adamw_update(b_.master, b_.params, b_.grads, b_.m, b_.v, pieces.data(), (int)pieces.size(),
               b_.norm, clip, h.lr, h.beta1, h.beta2, h.eps, step, stream_);
  comm_->after_update();
  // With peers the norm's sum (ZeRO-1) and the gather are collectives: wait for the stream while
  // watching for a failed rank, as every other wait of a step does. Alone: for the copy only.
  if (comm_->has_peers()) sync();
  else CUDA_CHECK(cudaEventSynchronize(norm_copied_));
  return grad_norm_from_squared(*h_norm_);
}

}  // namespace gpt_cuda
