// A JavaScript workload for the JIT tests: hotAllocate runs often enough to be compiled, and
// the objects it allocates fault in fresh pages from its compiled code.
// usage: node --perf-prof hot.js [ROUNDS=40] (jitdump) or node --perf-basic-prof hot.js (perf map)
const kept = [];
function hotAllocate(n) {
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = { index: i, values: [i, i + 1, i + 2] };
  return out;
}
const rounds = Number(process.argv[2] || 40);
for (let round = 0; round < rounds; round++) kept.push(hotAllocate(50000));
console.log(kept.length);
