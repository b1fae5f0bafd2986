// A static Go program whose pipe reads go through the runtime's network poller (epoll):
// a read that times out at its deadline, then a read a sleeping goroutine's write wakes.
package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	r, w, _ := os.Pipe()
	r.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	fmt.Println("timed out read", n, os.IsTimeout(err))
	done := make(chan bool)
	go func() {
		r.SetReadDeadline(time.Time{})
		n, err := r.Read(buf)
		fmt.Println("read", string(buf[:n]), err)
		done <- true
	}()
	time.Sleep(30 * time.Millisecond)
	w.Write([]byte("late"))
	<-done
	data, err := os.ReadFile("/proc/self/comm")
	fmt.Println("readfile", len(data) > 0, err)
}
