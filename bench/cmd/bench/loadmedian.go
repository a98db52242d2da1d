package main

import "time"

// loadSettle is how long the cold starts after the first wait before their
// request benchmark; the first waits the settle time, to read memory.
const loadSettle = 10 * time.Second

// medianLoad combines the request benchmarks of the cold starts: each figure
// is its median over the runs (report.go's median), taken separately (a
// 2000-create burst of a few seconds on a shared machine moves its tail by a
// third between runs).
func medianLoad(runs []loadResult) loadResult {
	num := func(f func(loadResult) float64) float64 {
		v, _ := medianOf(runs, f)
		return v
	}
	dur := func(f func(loadResult) time.Duration) time.Duration {
		return time.Duration(num(func(l loadResult) float64 { return float64(f(l)) }))
	}
	count := func(f func(loadResult) int) int {
		return int(num(func(l loadResult) float64 { return float64(f(l)) }))
	}
	total := func(f func(loadResult) int) int {
		n := 0
		for _, l := range runs {
			n += f(l)
		}
		return n
	}
	m := loadResult{
		Creates: runs[0].Creates,
		Clients: runs[0].Clients,
		// Failures are summed, not a median: one run with errors marks the configuration.
		Errors:          total(func(l loadResult) int { return l.Errors }),
		CreateTime:      dur(func(l loadResult) time.Duration { return l.CreateTime }),
		CreatesPerS:     num(func(l loadResult) float64 { return l.CreatesPerS }),
		CPUPerCreate:    dur(func(l loadResult) time.Duration { return l.CPUPerCreate }),
		PeakRSS:         int64(num(func(l loadResult) float64 { return float64(l.PeakRSS) })),
		CreateP50:       dur(func(l loadResult) time.Duration { return l.CreateP50 }),
		CreateP99:       dur(func(l loadResult) time.Duration { return l.CreateP99 }),
		ListItems:       runs[0].ListItems,
		ListMedian:      dur(func(l loadResult) time.Duration { return l.ListMedian }),
		WatchLoadP50:    dur(func(l loadResult) time.Duration { return l.WatchLoadP50 }),
		WatchLoadP99:    dur(func(l loadResult) time.Duration { return l.WatchLoadP99 }),
		WatchLoadE2EP50: dur(func(l loadResult) time.Duration { return l.WatchLoadE2EP50 }),
		WatchLoadE2EP99: dur(func(l loadResult) time.Duration { return l.WatchLoadE2EP99 }),
		WatchLoadN:      count(func(l loadResult) int { return l.WatchLoadN }),
		WatchLoadEarly:  count(func(l loadResult) int { return l.WatchLoadEarly }),
		WatchLoadMissed: total(func(l loadResult) int { return l.WatchLoadMissed }),
		WatchPaced:      runs[0].WatchPaced,
		WatchP50:        dur(func(l loadResult) time.Duration { return l.WatchP50 }),
		WatchP99:        dur(func(l loadResult) time.Duration { return l.WatchP99 }),
		WatchE2EP50:     dur(func(l loadResult) time.Duration { return l.WatchE2EP50 }),
		WatchE2EP99:     dur(func(l loadResult) time.Duration { return l.WatchE2EP99 }),
		WatchEarly:      count(func(l loadResult) int { return l.WatchEarly }),
		Load1:           num(func(l loadResult) float64 { return l.Load1 }),
	}
	for _, l := range runs {
		m.ListTimes = append(m.ListTimes, l.ListTimes...)
	}
	return m
}
