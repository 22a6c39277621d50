// bench_kernels — `flashgpt bench-kernels`: times the model's kernels besides the attention
// backends (those are `flashgpt bench-attention`'s), decode attention over a KV cache, and a
// whole d12 training step, on the GPU. CUDA builds only (the CPU build says so).
#pragma once

// argv[0] is the subcommand's name; the options follow (see --help). Returns the exit code;
// errors throw flashgpt::Error.
int bench_kernels_main(int argc, char** argv);
