package latency

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Missing marks a pair of hosts whose RTT was never measured.
const Missing = -1

// MaxHosts bounds the size of a matrix file: 20 000 hosts are 1.6 GB of
// float32 entries, more than any swarm on one machine can use.
const MaxHosts = 20000

// maxLine bounds one line of a matrix file (MaxHosts entries of up to 16 bytes).
const maxLine = MaxHosts * 16

// RTTs gives the round-trip time between hosts in milliseconds. Matrix,
// Synthetic and Placement implement it.
type RTTs interface {
	// Len is the number of hosts.
	Len() int
	// RTT is the round-trip time between hosts i and j in milliseconds, or
	// Missing when it is not known. RTT(i, i) is 0.
	RTT(i, j int) float64
}

// Matrix is a measured all-pairs RTT matrix.
type Matrix struct {
	// Name says where the matrix came from: a file path or a builtin name.
	Name string
	n    int
	rtt  []float32 // row-major, milliseconds, Missing where unknown
}

// NewMatrix builds an n×n matrix from a function, for tests and generated
// inputs. rtt(i, i) is ignored (the diagonal is 0).
func NewMatrix(name string, n int, rtt func(i, j int) float64) *Matrix {
	m := &Matrix{Name: name, n: n, rtt: make([]float32, n*n)}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i != j {
				m.rtt[i*n+j] = float32(rtt(i, j))
			}
		}
	}
	return m
}

// Materialize copies any RTTs into a Matrix.
func Materialize(name string, r RTTs) *Matrix {
	return NewMatrix(name, r.Len(), r.RTT)
}

// Len is the number of hosts.
func (m *Matrix) Len() int { return m.n }

// RTT is the measured RTT between hosts i and j in ms, or Missing.
func (m *Matrix) RTT(i, j int) float64 { return float64(m.rtt[i*m.n+j]) }

// MissingPairs counts the ordered pairs (i ≠ j) with no measurement.
func (m *Matrix) MissingPairs() int {
	c := 0
	for i := 0; i < m.n; i++ {
		for j := 0; j < m.n; j++ {
			if i != j && m.rtt[i*m.n+j] < 0 {
				c++
			}
		}
	}
	return c
}

// Filled returns a symmetric copy with every pair known: (i, j) and (j, i)
// are averaged where both are measured, a pair measured one way takes that
// value, and a pair measured neither way takes the best two-hop path
// min_k d(i,k)+d(k,j) (or, failing that, the median of all known RTTs).
// Swarms need a latency for every link; this is the least-surprising one.
func (m *Matrix) Filled() *Matrix {
	n := m.n
	out := &Matrix{Name: m.Name, n: n, rtt: make([]float32, n*n)}
	var known []float64
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := m.rtt[i*n+j], m.rtt[j*n+i]
			var v float32
			switch {
			case a >= 0 && b >= 0:
				v = (a + b) / 2
			case a >= 0:
				v = a
			case b >= 0:
				v = b
			default:
				v = Missing
			}
			out.rtt[i*n+j], out.rtt[j*n+i] = v, v
			if v >= 0 {
				known = append(known, float64(v))
			}
		}
	}
	median := 1.0
	if len(known) > 0 {
		sort.Float64s(known)
		median = known[len(known)/2]
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if out.rtt[i*n+j] >= 0 {
				continue
			}
			best := math.Inf(1)
			for k := 0; k < n; k++ {
				a, b := out.rtt[i*n+k], out.rtt[k*n+j]
				if k != i && k != j && a >= 0 && b >= 0 && float64(a+b) < best {
					best = float64(a + b)
				}
			}
			if math.IsInf(best, 1) {
				best = median
			}
			out.rtt[i*n+j], out.rtt[j*n+i] = float32(best), float32(best)
		}
	}
	return out
}

// ParseError is a malformed matrix file; Line is 1-based.
type ParseError struct {
	Name string
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("latency matrix %s: %s", e.Name, e.Msg)
	}
	return fmt.Sprintf("latency matrix %s: line %d: %s", e.Name, e.Line, e.Msg)
}

// Parse reads a matrix in the format of the shipped files: '#' comment lines,
// then one row per host of tab- (or space-) separated RTTs in milliseconds, a
// zero diagonal and -1 for a missing pair. A malformed file is refused with a
// *ParseError naming the line.
func Parse(r io.Reader, name string) (*Matrix, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLine)
	m := &Matrix{Name: name}
	lineNo, row := 0, 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if row == 0 {
			if len(fields) > MaxHosts {
				return nil, &ParseError{name, lineNo, fmt.Sprintf("%d columns: more than the %d hosts a matrix may have", len(fields), MaxHosts)}
			}
			m.n = len(fields)
			// Room for the first row only: the rows to come must exist
			// before they cost memory (a one-row file of 20 000 columns
			// would otherwise reserve 1.6 GB before being refused).
			m.rtt = make([]float32, 0, m.n)
		}
		if len(fields) != m.n {
			return nil, &ParseError{name, lineNo, fmt.Sprintf("row %d has %d values, the first row has %d (ragged rows)", row+1, len(fields), m.n)}
		}
		if row >= m.n {
			return nil, &ParseError{name, lineNo, fmt.Sprintf("more rows than the %d columns: a matrix must be square", m.n)}
		}
		for col, f := range fields {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, &ParseError{name, lineNo, fmt.Sprintf("column %d: %q is not a number", col+1, f)}
			}
			switch {
			case col == row && v != 0:
				return nil, &ParseError{name, lineNo, fmt.Sprintf("column %d: diagonal entry is %v, must be 0", col+1, v)}
			case v < 0 && v != Missing:
				return nil, &ParseError{name, lineNo, fmt.Sprintf("column %d: negative RTT %v (only -1, missing, may be negative)", col+1, v)}
			case v > math.MaxFloat32:
				return nil, &ParseError{name, lineNo, fmt.Sprintf("column %d: RTT %v is out of range", col+1, v)}
			}
			m.rtt = append(m.rtt, float32(v))
		}
		row++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{name, lineNo + 1, fmt.Sprintf("line longer than %d bytes", maxLine)}
		}
		return nil, &ParseError{name, lineNo, err.Error()}
	}
	if row == 0 {
		return nil, &ParseError{name, 0, "no rows: the file holds no matrix"}
	}
	if row != m.n {
		return nil, &ParseError{name, lineNo, fmt.Sprintf("%d rows but %d columns: a matrix must be square", row, m.n)}
	}
	return m, nil
}

// Load reads a matrix file; a name ending in .gz is decompressed.
func Load(path string) (*Matrix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("latency matrix: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, &ParseError{path, 0, "not a gzip file: " + err.Error()}
		}
		defer zr.Close()
		r = zr
	}
	return Parse(r, path)
}

//go:embed data/*.tsv.gz
var builtin embed.FS

// Default is the name of the matrix used when none is given.
const Default = "planetlab-490"

// BuiltinNames lists the matrices shipped inside the package.
func BuiltinNames() []string { return []string{"planetlab-490", "seattle-99"} }

// Builtin loads a shipped matrix by name ("planetlab-490", "seattle-99").
func Builtin(name string) (*Matrix, error) {
	b, err := builtin.ReadFile("data/" + name + ".tsv.gz")
	if err != nil {
		return nil, fmt.Errorf("latency matrix: no builtin matrix %q (have %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return Parse(zr, name)
}

// Open resolves a matrix spec as the CLI takes it: "" for the default, a
// builtin name, or a file path.
func Open(spec string) (*Matrix, error) {
	if spec == "" {
		spec = Default
	}
	for _, n := range BuiltinNames() {
		if spec == n {
			return Builtin(n)
		}
	}
	return Load(spec)
}
