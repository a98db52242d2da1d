package datastore

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// Verbosity used for the third-party loggers routed into klog. Warnings are
// shown by default; info lines of kine and etcd are chatty, so they need -v=2.
const (
	vInfo  = 2
	vDebug = 4
	vTrace = 6
)

// --- logrus (kine) ---

var (
	logrusOnce   sync.Once
	logrusTarget atomic.Pointer[logr.Logger]
)

// routeLogrus sends the process-global logrus logger (used by kine) to lg.
// The last caller wins: logrus has a single global output.
func routeLogrus(lg logr.Logger) {
	logrusTarget.Store(&lg)
	logrusOnce.Do(func() {
		logrus.SetOutput(io.Discard)
		logrus.SetFormatter(discardFormatter{})
		logrus.AddHook(logrusHook{})
	})
	switch {
	case lg.V(vTrace).Enabled():
		logrus.SetLevel(logrus.TraceLevel)
	case lg.V(vDebug).Enabled():
		logrus.SetLevel(logrus.DebugLevel)
	default:
		logrus.SetLevel(logrus.InfoLevel)
	}
}

type discardFormatter struct{}

func (discardFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

type logrusHook struct{}

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (logrusHook) Fire(e *logrus.Entry) error {
	lg := logrusTarget.Load()
	if lg == nil {
		return nil
	}
	var err error
	kv := make([]any, 0, 2*len(e.Data))
	for _, k := range sortedKeys(e.Data) {
		if k == logrus.ErrorKey {
			if ev, ok := e.Data[k].(error); ok {
				err = ev
				continue
			}
		}
		kv = append(kv, k, e.Data[k])
	}
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel:
		lg.Error(err, e.Message, kv...)
		if e.Level != logrus.ErrorLevel {
			klog.Flush() // logrus exits or panics right after the hooks
		}
		return nil
	case logrus.WarnLevel:
		lg.Info(e.Message, withErr(kv, err)...)
	case logrus.InfoLevel:
		lg.V(vInfo).Info(e.Message, withErr(kv, err)...)
	case logrus.DebugLevel:
		lg.V(vDebug).Info(e.Message, withErr(kv, err)...)
	default:
		lg.V(vTrace).Info(e.Message, withErr(kv, err)...)
	}
	return nil
}

func withErr(kv []any, err error) []any {
	if err != nil {
		return append(kv, "err", err)
	}
	return kv
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// --- zap (etcd server and client) ---

// ZapLogger returns a zap logger whose entries go to lg (the etcd server and
// clients log with zap).
func ZapLogger(lg logr.Logger) *zap.Logger {
	return zap.New(logrCore{log: lg})
}

// logrCore is a zapcore.Core that writes to a logr.Logger.
type logrCore struct {
	log    logr.Logger
	fields []zapcore.Field
}

func (c logrCore) Enabled(l zapcore.Level) bool {
	switch {
	case l >= zapcore.ErrorLevel:
		return true
	case l == zapcore.WarnLevel:
		return c.log.Enabled()
	case l == zapcore.InfoLevel:
		return c.log.V(vInfo).Enabled()
	default:
		return c.log.V(vDebug).Enabled()
	}
}

func (c logrCore) With(fields []zapcore.Field) zapcore.Core {
	all := make([]zapcore.Field, 0, len(c.fields)+len(fields))
	all = append(append(all, c.fields...), fields...)
	return logrCore{log: c.log, fields: all}
}

func (c logrCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c logrCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	var err error
	if v, ok := enc.Fields["error"]; ok {
		err = errors.New(fmt.Sprint(v))
		delete(enc.Fields, "error")
	}
	kv := make([]any, 0, 2*len(enc.Fields)+2)
	if e.LoggerName != "" {
		kv = append(kv, "logger", e.LoggerName)
	}
	for _, k := range sortedKeys(enc.Fields) {
		kv = append(kv, k, enc.Fields[k])
	}
	switch {
	case e.Level <= zapcore.ErrorLevel && e.Level >= zapcore.WarnLevel && benignEtcd(e.Message, err):
		c.log.V(vInfo).Info(e.Message, withErr(kv, err)...)
	case e.Level >= zapcore.ErrorLevel:
		c.log.Error(err, e.Message, kv...)
		if e.Level > zapcore.ErrorLevel {
			klog.Flush() // zap panics or exits after Write
		}
	case e.Level == zapcore.WarnLevel:
		c.log.Info(e.Message, withErr(kv, err)...)
	case e.Level == zapcore.InfoLevel:
		c.log.V(vInfo).Info(e.Message, withErr(kv, err)...)
	default:
		c.log.V(vDebug).Info(e.Message, withErr(kv, err)...)
	}
	return nil
}

func (logrCore) Sync() error { return nil }

// benignEtcd reports etcd warnings and errors that every start or clean
// shutdown of a single loopback member produces, or a first start; they are
// demoted to info.
func benignEtcd(msg string, err error) bool {
	switch msg {
	case "Running http and grpc server on single port. This is not recommended for production.",
		"simple token is not cryptographically signed":
		return true
	}
	if err == nil {
		return false
	}
	s := err.Error()
	if msg == "failed to update storage version" && strings.Contains(s, "missing term information") {
		// etcd v3.7.3 (etcdserver/version/monitor.go): a fresh member's
		// storage version monitor runs when the cluster version is first
		// set, before the first backend commit has saved the raft term,
		// and tries again 4 s later with success (etcd-io/etcd#18978;
		// TestCanaryEtcdStorageVersionTerm).
		return true
	}
	return strings.Contains(s, "use of closed network connection") || strings.Contains(s, "http: Server closed")
}
