package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// How a term begins, and how long the Lease had no working leader: from
// the previous holder's last renewal (a release writes one) to the
// acquisition.
func TestBeginningAfter(t *testing.T) {
	sent := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(sent.Add(d)) }
	for _, tc := range []struct {
		name       string
		prev       resourcelock.LeaderElectionRecord
		early      bool
		kind       string
		leaderless time.Duration
	}{
		{"released", resourcelock.LeaderElectionRecord{AcquireTime: at(-time.Minute), RenewTime: at(-40 * time.Millisecond)}, false, beganHandover, 40 * time.Millisecond},
		{"expired", resourcelock.LeaderElectionRecord{HolderIdentity: "old", AcquireTime: at(-time.Minute), RenewTime: at(-16 * time.Second)}, false, beganExpiry, 16 * time.Second},
		{"crashed", resourcelock.LeaderElectionRecord{HolderIdentity: "old", AcquireTime: at(-time.Minute), RenewTime: at(-1500 * time.Millisecond)}, true, beganCrashTakeover, 1500 * time.Millisecond},
		{"never held", resourcelock.LeaderElectionRecord{}, false, beganFirst, 0},
		// The previous holder's clock ahead of this replica's.
		{"renewed in the future", resourcelock.LeaderElectionRecord{HolderIdentity: "old", AcquireTime: at(-time.Minute), RenewTime: at(time.Second)}, false, beganExpiry, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := beginningAfter(tc.prev, tc.early, sent)
			assert.Equal(t, tc.kind, b.kind())
			assert.Equal(t, tc.leaderless, b.leaderless)
		})
	}
}
