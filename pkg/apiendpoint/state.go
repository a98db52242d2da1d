package apiendpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// StateFileName is the state file's name in the node's directory.
const StateFileName = "api-servers.json"

// state is the state file: the servers learned from the `kubernetes`
// Service's EndpointSlice, sorted.
type state struct {
	Servers []string `json:"servers"`
}

// load reads the state file. A missing file is no servers; one that is
// corrupt is ignored with one log line: the node goes on with --server.
func (e *Endpoint) load(logger klog.Logger) []string {
	if e.cfg.StateFile == "" {
		return nil
	}
	data, err := os.ReadFile(e.cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		var st state
		if err = decodeState(data, &st); err == nil {
			e.saved = data
			return st.Servers
		}
	}
	logger.Info("Ignoring the API servers kept on disk, using the first server only", "file", e.cfg.StateFile, "server", e.cfg.Server, "err", err.Error())
	return nil
}

// decodeState parses data strictly: every server is host:port.
func decodeState(data []byte, st *state) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(st); err != nil {
		return fmt.Errorf("not a server list: %w", err)
	}
	for _, a := range st.Servers {
		if err := validAddress(a); err != nil {
			return err
		}
	}
	return nil
}

// saveLocked writes the learned servers when they differ from what the file
// holds (0600, atomically: flash is written only on a change).
func (e *Endpoint) saveLocked(logger klog.Logger) {
	if e.cfg.StateFile == "" {
		return
	}
	data, err := json.Marshal(state{Servers: e.learned})
	if err != nil {
		return
	}
	data = append(data, '\n')
	if bytes.Equal(data, e.saved) {
		return
	}
	if _, err := atomicfile.Write(e.cfg.StateFile, data, 0o600); err != nil {
		logger.Error(err, "Keeping the API servers on disk failed; the next start begins with the first server")
		return
	}
	e.saved = data
}

// LoadServers reads the servers kept in a state file (host:port each), for
// a node that must reach the API before its endpoint runs (an agent's
// restart, when the server it joined through is down). A missing file is
// no servers; a corrupt one is an error, which the caller logs and ignores.
func LoadServers(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st state
	if err := decodeState(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return st.Servers, nil
}
