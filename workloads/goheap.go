// A Go workload for far memory: a heap of MiB megabytes written and read back twice, given
// back to the kernel (debug.FreeOSMemory: the runtime's madvise by system call) and half of it
// taken again. It prints a checksum; a wrong value ends it with status 1.
// usage: goheap MiB
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
)

func value(i, j int, seed uint64) uint64 {
	return (uint64(i)*0x9E3779B97F4A7C15 ^ uint64(j)*0xBF58476D1CE4E5B9) + seed
}

func fill(mb int, seed uint64) [][]uint64 {
	chunks := make([][]uint64, mb)
	for i := range chunks {
		c := make([]uint64, 1<<17)
		for j := range c {
			c[j] = value(i, j, seed)
		}
		chunks[i] = c
	}
	return chunks
}

func check(chunks [][]uint64, seed uint64) uint64 {
	var sum uint64
	for i, c := range chunks {
		for j, v := range c {
			if v != value(i, j, seed) {
				fmt.Println("bad chunk", i, "word", j)
				os.Exit(1)
			}
			sum += v
		}
	}
	return sum
}

func main() {
	mb, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Println("usage: goheap MiB")
		os.Exit(2)
	}
	chunks := fill(mb, 1)
	sum := check(chunks, 1) + check(chunks, 1)
	chunks = nil
	debug.FreeOSMemory()
	chunks = fill(mb/2, 2)
	sum += check(chunks, 2)
	fmt.Println("sum", sum)
}
