package frontend

import (
	"fmt"
	"sync"
	"testing"
)

func TestLocksSerialiseOneContainer(t *testing.T) {
	var l Locks
	var mu sync.Mutex
	inside := map[string]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		id := fmt.Sprintf("c%d", i%2)
		wg.Go(func() {
			defer l.Lock(id)()
			mu.Lock()
			inside[id]++
			n := inside[id]
			mu.Unlock()
			if n != 1 {
				t.Errorf("%d holders of %s's lock at once, want 1", n, id)
			}
			mu.Lock()
			inside[id]--
			mu.Unlock()
		})
	}
	wg.Wait()
	l.Forget("c0")
	l.Lock("c0")() // a forgotten container's lock is made again
}
