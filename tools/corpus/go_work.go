// A static Go program for the fidelity corpus: goroutines over a channel, a sort, and the
// RLIMIT_NOFILE and CPU count the Go runtime reads at start-up (Go raises NOFILE's soft
// limit to its hard one).
package main

import (
	"fmt"
	"runtime"
	"sort"
	"syscall"
)

func main() {
	results := make(chan int)
	for i := 0; i < 8; i++ {
		go func(n int) { results <- (n * 7919) % 101 }(i)
	}
	got := []int{}
	for i := 0; i < 8; i++ {
		got = append(got, <-results)
	}
	sort.Ints(got)
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	fmt.Println(got, runtime.NumCPU(), lim.Cur, lim.Max)
}
