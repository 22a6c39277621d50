// bench_attention — `flashgpt bench-attention`: times forward, backward and forward+backward of
// the GPU attention backends (the registry in kernels/attention/attention.cuh) over head sizes
// and sequence lengths, printing TFLOP/s and the extra device memory. CUDA builds only.
// scripts/bench_attention.py runs it next to PyTorch's SDPA backends on the same GPU.
#pragma once

// argv[0] is the subcommand's name; the options follow (see --help). Returns the exit code;
// errors throw flashgpt::Error.
int bench_attention_main(int argc, char** argv);
