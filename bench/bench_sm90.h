// bench_sm90 — the tensor-core (wgmma) and MUFU.EX2 rates that bound the flash3 kernels, on
// this GPU: `flashgpt bench-kernels --only tensor` (bench_kernels.cu) prints them.
#pragma once

// Prints one row per product shape and warpgroup count, then MUFU.EX2's rates (f32 and the
// packed f16x2 and bf16x2 forms, in exponentials).
void bench_sm90_rates();
