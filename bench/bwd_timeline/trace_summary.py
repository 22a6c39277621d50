# Summarise the backward's block timeline dumped by trace_bwd (FLASHGPT_BWD_TRACE build).
import struct, sys, statistics as st
from collections import defaultdict
path = sys.argv[1]
data = open(path, 'rb').read()
N = len(data) // (24 * 8)
rows = [struct.unpack_from('<24Q', data, i * 192) for i in range(N)]
blocks = [r for r in rows if r[2] != 0]
by_sm = defaultdict(list)
for r in blocks:
    by_sm[r[0] & 0xffff].append(r)
ph = defaultdict(list)
steps_first, steps_rest, waits = [], [], []
span_total = 0
for sm, bl in by_sm.items():
    bl.sort(key=lambda r: r[2])
    prev_end = None
    for r in bl:
        total = (r[0] >> 16) & 0xffff
        end = max(r[22], r[23])
        if prev_end is not None:
            ph['gap (previous block end -> entry)'].append(r[2] - prev_end)
        prev_end = end
        ph['entry -> barrier init done'].append(r[3] - r[2])
        ph['-> K/V full (math)'].append(r[4] - r[3])
        ph['K/V full -> step 0 stage full'].append(r[5] - r[4])
        n = min(total, 8)
        for it in range(n):
            d = r[13 + it] - r[5 + it]
            (steps_first if it == 0 else steps_rest).append(d)
            if it + 1 < n:
                waits.append(r[5 + it + 1] - r[13 + it])
        last = r[13 + n - 1] if total <= 8 else None
        if last is not None:
            ph['last step end -> epilogue start'].append(r[21] - last)
        ph['epilogue (dK, dV stores)'].append(r[22] - r[21])
        ph['epilogue end -> dQ writer done'].append(max(0, r[23] - r[22]))
        ph['block (entry -> end)'].append(end - r[2])
    span_total += max(max(r[22], r[23]) for r in bl) - bl[0][2]
print(f'{len(blocks)} blocks on {len(by_sm)} SMs; steps/block mean '
      f'{st.mean(((r[0] >> 16) & 0xffff) for r in blocks):.2f}')
print(f'{"phase":40s} {"mean cyc":>9s} {"median":>8s} {"sum/SM-span":>11s}')
for k, v in ph.items():
    if k.startswith('block'): continue
    print(f'{k:40s} {st.mean(v):9.0f} {st.median(v):8.0f} {sum(v)/span_total:11.3f}')
for name, v in (('step 0 (full -> end)', steps_first), ('steps 1.. (full -> end)', steps_rest),
                ('between steps (end -> next full)', waits)):
    if v: print(f'{name:40s} {st.mean(v):9.0f} {st.median(v):8.0f} {sum(v)/span_total:11.3f}')
v = ph['block (entry -> end)']
print(f'{"block (entry -> end)":40s} {st.mean(v):9.0f} {st.median(v):8.0f} {sum(v)/span_total:11.3f}')
