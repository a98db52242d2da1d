package main

import (
	"slices"
	"time"
)

// loadSettle is how long the cold starts after the first wait before their
// request benchmark; the first waits the settle time, to read memory.
const loadSettle = 10 * time.Second

// medianLoad combines the request benchmarks of the cold starts: each figure
// is its median over the runs, taken separately (a 2000-create burst of a few
// seconds on a shared machine moves its tail by a third between runs).
func medianLoad(runs []loadResult) loadResult {
	if len(runs) == 1 {
		return runs[0]
	}
	dur := func(f func(*loadResult) time.Duration) time.Duration {
		v := make([]time.Duration, len(runs))
		for i := range runs {
			v[i] = f(&runs[i])
		}
		return middle(v)
	}
	num := func(f func(*loadResult) float64) float64 {
		v := make([]float64, len(runs))
		for i := range runs {
			v[i] = f(&runs[i])
		}
		return middle(v)
	}
	count := func(f func(*loadResult) int) int {
		return int(num(func(l *loadResult) float64 { return float64(f(l)) }))
	}
	m := loadResult{
		Creates:         runs[0].Creates,
		Clients:         runs[0].Clients,
		Errors:          count(func(l *loadResult) int { return l.Errors }),
		CreateTime:      dur(func(l *loadResult) time.Duration { return l.CreateTime }),
		CreatesPerS:     num(func(l *loadResult) float64 { return l.CreatesPerS }),
		CPUPerCreate:    dur(func(l *loadResult) time.Duration { return l.CPUPerCreate }),
		CreateP50:       dur(func(l *loadResult) time.Duration { return l.CreateP50 }),
		CreateP99:       dur(func(l *loadResult) time.Duration { return l.CreateP99 }),
		ListItems:       runs[0].ListItems,
		ListMedian:      dur(func(l *loadResult) time.Duration { return l.ListMedian }),
		WatchLoadP50:    dur(func(l *loadResult) time.Duration { return l.WatchLoadP50 }),
		WatchLoadP99:    dur(func(l *loadResult) time.Duration { return l.WatchLoadP99 }),
		WatchLoadE2EP50: dur(func(l *loadResult) time.Duration { return l.WatchLoadE2EP50 }),
		WatchLoadE2EP99: dur(func(l *loadResult) time.Duration { return l.WatchLoadE2EP99 }),
		WatchLoadN:      count(func(l *loadResult) int { return l.WatchLoadN }),
		WatchLoadEarly:  count(func(l *loadResult) int { return l.WatchLoadEarly }),
		WatchPaced:      runs[0].WatchPaced,
		WatchP50:        dur(func(l *loadResult) time.Duration { return l.WatchP50 }),
		WatchP99:        dur(func(l *loadResult) time.Duration { return l.WatchP99 }),
		WatchE2EP50:     dur(func(l *loadResult) time.Duration { return l.WatchE2EP50 }),
		WatchE2EP99:     dur(func(l *loadResult) time.Duration { return l.WatchE2EP99 }),
		WatchEarly:      count(func(l *loadResult) int { return l.WatchEarly }),
		Load1:           num(func(l *loadResult) float64 { return l.Load1 }),
	}
	for _, l := range runs {
		m.ListTimes = append(m.ListTimes, l.ListTimes...)
	}
	return m
}

// middle is the median value (the upper one of an even count).
func middle[T time.Duration | float64](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
