package pgembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (install PostgreSQL, e.g. `apt-get install postgresql`, or set DATABASE_URL)")

// binaries are the PostgreSQL programs the cluster is run with.
type binaries struct {
	initdb, pgCtl string
}

// serverPrograms must all be present for a folder of binaries to be usable;
// pg_ctl runs the postgres beside it.
var serverPrograms = []string{"initdb", "pg_ctl", "postgres"}

// findBinaries looks on PATH, then in `pg_config --bindir`, then in the
// folders Debian/Ubuntu and source builds install to, since distribution
// packages usually keep the server programs off PATH.
func findBinaries(ctx context.Context) (binaries, error) {
	var onPath []string
	for _, name := range serverPrograms {
		if p, err := exec.LookPath(name); err == nil {
			onPath = append(onPath, p)
		}
	}
	if len(onPath) == len(serverPrograms) {
		return binaries{initdb: onPath[0], pgCtl: onPath[1]}, nil
	}

	var dirs []string
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	dirs = append(dirs, debianBinDirs()...)
	dirs = append(dirs, "/usr/local/pgsql/bin")
	for _, dir := range dirs {
		if hasServerPrograms(dir) {
			return binaries{initdb: filepath.Join(dir, "initdb"), pgCtl: filepath.Join(dir, "pg_ctl")}, nil
		}
	}
	return binaries{}, fmt.Errorf("looked on PATH, in `pg_config --bindir`, /usr/lib/postgresql/*/bin and /usr/local/pgsql/bin: %w", ErrNoBinaries)
}

// Program finds one of PostgreSQL's client programs (pgbench, psql) where
// the server programs are found: on PATH, or beside them.
func Program(ctx context.Context, name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	bins, err := findBinaries(ctx)
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(bins.pgCtl), name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not beside pg_ctl: %w", name, err)
	}
	return p, nil
}

// debianBinDirs lists /usr/lib/postgresql/<version>/bin, newest first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // the pattern is valid
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64) // "15", "9.6"; others sort last
		return v
	}
	sort.SliceStable(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs
}

func hasServerPrograms(dir string) bool {
	for _, name := range serverPrograms {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}
