// A JavaScript workload for far memory: a V8 heap of about MiB megabytes (arrays of small
// integers, 8 bytes each) written and read back twice. It prints a checksum; a wrong value ends
// it with status 1.
// usage: node heap.js MiB
const mb = Number(process.argv[2]);
const arrays = [];
for (let i = 0; i < mb; i++) {
  const a = new Array(1 << 17);
  for (let j = 0; j < a.length; j++) a[j] = (i * 7 + j) % 1000003;
  arrays.push(a);
}
let sum = 0;
for (let pass = 0; pass < 2; pass++) {
  arrays.forEach((a, i) => {
    for (let j = 0; j < a.length; j++) {
      if (a[j] !== (i * 7 + j) % 1000003) {
        console.log(`bad array ${i} index ${j}`);
        process.exit(1);
      }
      sum += a[j];
    }
  });
}
console.log(`sum ${sum}`);
