//go:build e2e

package cluster_test

import (
	"testing"
	"time"
)

func TestDevDescheduler(t *testing.T) {
	ctx := testContext(t, 25*time.Minute)
	checkDescheduler(ctx, t, client(t))
}
