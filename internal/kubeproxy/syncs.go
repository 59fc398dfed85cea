package kubeproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
)

// Sync is one sync of kube-proxy's rules for one IP family, as its log
// (--v=2) tells it.
type Sync struct {
	// Start and Done are when it began and ended.
	Start, Done time.Time
	// Family is "IPv4" or "IPv6".
	Family string
	// Endpoints is the number of endpoints, of every Service, that it
	// programmed; -1 if the log did not say.
	Endpoints int
}

var (
	klogTime   = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s`)
	syncStart  = regexp.MustCompile(`"Syncing (?:nftables|iptables) rules" ipFamily="(IPv[46])"`)
	syncCount  = regexp.MustCompile(`"Reloading service (?:nftables|iptables) data" ipFamily="(IPv[46])" numServices=\d+ numEndpoints=(\d+)`)
	syncFinish = regexp.MustCompile(`"SyncProxyRules complete" ipFamily="(IPv[46])"`)
)

// Syncs reads kube-proxy's log and returns its completed syncs, oldest
// first. The times are the log's, which is in local time and in the
// same clock as the test's.
func (p *Proxy) Syncs() ([]Sync, error) {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil, fmt.Errorf("kubeproxy: read its log: %w", err)
	}
	return parseSyncs(data, time.Now())
}

// parseSyncs parses klog lines; klog's header has no year, which now
// gives.
func parseSyncs(data []byte, now time.Time) ([]Sync, error) {
	var out []Sync
	open := map[string]*Sync{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		m := klogTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
		if err != nil {
			return nil, fmt.Errorf("kubeproxy: log time %q: %w", m[1], err)
		}
		at = at.AddDate(now.Year(), 0, 0)
		if at.After(now.Add(24 * time.Hour)) { // logged last year
			at = at.AddDate(-1, 0, 0)
		}
		switch {
		case syncStart.MatchString(line):
			fam := syncStart.FindStringSubmatch(line)[1]
			open[fam] = &Sync{Start: at, Family: fam, Endpoints: -1}
		case syncCount.MatchString(line):
			c := syncCount.FindStringSubmatch(line)
			if s := open[c[1]]; s != nil {
				s.Endpoints, _ = strconv.Atoi(c[2])
			}
		case syncFinish.MatchString(line):
			fam := syncFinish.FindStringSubmatch(line)[1]
			if s := open[fam]; s != nil {
				s.Done = at
				out = append(out, *s)
				delete(open, fam)
			}
		}
	}
	return out, sc.Err()
}
