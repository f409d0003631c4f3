package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultRoot is the directory results are written under.
const DefaultRoot = "results"

// ErrNoSeed is returned by WriteResults for parameters without a seed: a run
// that cannot be repeated is not a result.
var ErrNoSeed = errors.New("report: params have no \"seed\" field")

// Run is the output directory of one run of one experiment. Its methods may
// be called from one goroutine at a time.
type Run struct {
	Experiment string
	ID         string
	// Dir is root/Experiment/ID; it exists once New returns.
	Dir     string
	Started time.Time
	files   []string
}

// New creates the directory root/experiment/id (root "" is DefaultRoot) and
// returns the Run writing into it. id "" is the start time, UTC, to the
// second (see RunID). A directory that already exists is reused and files of
// the same name are overwritten, so rerunning an ID replaces its results.
func New(root, experiment, id string) (*Run, error) {
	now := time.Now().UTC()
	if root == "" {
		root = DefaultRoot
	}
	if id == "" {
		id = RunID(now, "")
	}
	for _, s := range []struct{ what, v string }{{"experiment", experiment}, {"run id", id}} {
		if err := checkName(s.v); err != nil {
			return nil, fmt.Errorf("report: %s: %w", s.what, err)
		}
	}
	dir := filepath.Join(root, experiment, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return &Run{Experiment: experiment, ID: id, Dir: dir, Started: now}, nil
}

// RunID names a run by its start time (UTC, sortable) and an optional
// suffix such as "seed42": "20261130T013415Z-seed42".
func RunID(t time.Time, suffix string) string {
	id := t.UTC().Format("20060102T150405Z")
	if suffix != "" {
		id += "-" + suffix
	}
	return id
}

// checkName keeps experiment names and run IDs to one path element, so that
// no name writes outside the results tree.
func checkName(s string) error {
	switch {
	case s == "" || s == "." || s == "..":
		return fmt.Errorf("%q is not a name", s)
	case strings.ContainsAny(s, `/\`+"\x00"):
		return fmt.Errorf("%q holds a path separator", s)
	}
	return nil
}

// Path is the path of a file in the run's directory.
func (r *Run) Path(name string) string { return filepath.Join(r.Dir, name) }

// Files lists the files written so far, relative to Dir, in order.
func (r *Run) Files() []string { return slices.Clone(r.files) }

// writeFile writes the whole file through a temporary name and a rename, so
// that an interrupted run never leaves a half-written result that parses.
func (r *Run) writeFile(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("report: file: %w", err)
	}
	path := r.Path(name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("report: %w", err)
	}
	r.note(name)
	return nil
}

// note records a file written into the run.
func (r *Run) note(name string) {
	if !slices.Contains(r.files, name) {
		r.files = append(r.files, name)
	}
}

// resultsFile is the layout of results.json.
type resultsFile struct {
	Experiment string    `json:"experiment"`
	RunID      string    `json:"run_id"`
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	GoVersion  string    `json:"go_version"`
	Params     any       `json:"params"`
	Results    any       `json:"results"`
	Files      []string  `json:"files"`
}

// WriteResults writes results.json: the experiment, run ID, start and end
// time, Go version, params, results and the files written so far, indented.
// params must encode as a JSON object with a "seed" field (any case), or
// ErrNoSeed is returned and nothing is written. Struct fields keep their
// order and json tags; NaN and ±Inf become null. Call it last, so that the
// list of files is complete; calling it again rewrites the file.
func (r *Run) WriteResults(params, results any) error {
	p, err := toJSONValue(reflect.ValueOf(params))
	if err != nil {
		return fmt.Errorf("report: params: %w", err)
	}
	if !hasSeed(p) {
		return ErrNoSeed
	}
	doc := resultsFile{
		Experiment: r.Experiment, RunID: r.ID, Started: r.Started,
		Finished: time.Now().UTC(), GoVersion: runtime.Version(),
		Params: params, Results: results, Files: r.Files(),
	}
	data, err := MarshalJSON(doc)
	if err != nil {
		return err
	}
	return r.writeFile("results.json", append(data, '\n'))
}

func hasSeed(v any) bool {
	switch o := v.(type) {
	case object:
		return slices.ContainsFunc(o, func(f field) bool { return strings.EqualFold(f.name, "seed") })
	case map[string]any:
		for k := range o {
			if strings.EqualFold(k, "seed") {
				return true
			}
		}
	}
	return false
}

// MarshalJSON is json.MarshalIndent (two spaces) that writes NaN and ±Inf
// as null instead of failing, keeping struct field order and json tags.
func MarshalJSON(v any) ([]byte, error) {
	s, err := toJSONValue(reflect.ValueOf(v))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// WriteCSV writes name.csv (".csv" is added unless name has it) with a
// header row and rows, each as long as header. Use Cells to format values.
func (r *Run) WriteCSV(name string, header []string, rows [][]string) error {
	if !strings.HasSuffix(name, ".csv") {
		name += ".csv"
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(header); err != nil {
		return fmt.Errorf("report: %s: %w", name, err)
	}
	for i, row := range rows {
		if len(row) != len(header) {
			return fmt.Errorf("report: %s: row %d has %d cells, the header %d", name, i+1, len(row), len(header))
		}
		if err := w.Write(row); err != nil {
			return fmt.Errorf("report: %s: %w", name, err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("report: %s: %w", name, err)
	}
	return r.writeFile(name, buf.Bytes())
}

// WriteTable writes a Table as name.csv, numbers at full precision.
func (r *Run) WriteTable(name string, t *Table) error {
	rows := make([][]string, len(t.rows))
	for i, row := range t.rows {
		rows[i] = Cells(row...)
	}
	return r.WriteCSV(name, t.header, rows)
}

// Cells formats values for a CSV row: floats at full precision (the
// shortest text that reads back to the same float64, "NaN", "+Inf"),
// everything else with fmt's %v.
func Cells(vals ...any) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case float64:
			out[i] = strconv.FormatFloat(x, 'g', -1, 64)
		case float32:
			out[i] = strconv.FormatFloat(float64(x), 'g', -1, 32)
		case string:
			out[i] = x
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// object is a JSON object whose fields keep the order they were added in
// (encoding/json would sort a map's keys and lose a struct's field order).
type object []field

type field struct {
	name string
	v    any
}

func (o object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(f.name)
		buf.Write(k)
		buf.WriteByte(':')
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

var marshalerType = reflect.TypeFor[json.Marshaler]()

// toJSONValue rewrites v into values encoding/json encodes as it would v,
// except that NaN and ±Inf floats become nil. It follows the json tag rules
// that results use: renamed and "-" fields, omitempty, embedded structs.
func toJSONValue(v reflect.Value) (any, error) {
	if !v.IsValid() {
		return nil, nil
	}
	if v.Type().Implements(marshalerType) {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
			return nil, nil
		}
		b, err := v.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return nil, err
		}
		return json.RawMessage(b), nil
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, nil
		}
		return v.Interface(), nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, nil
		}
		return toJSONValue(v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return nil, nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Interface(), nil // []byte encodes as base64
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			e, err := toJSONValue(v.Index(i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case reflect.Map:
		if v.IsNil() {
			return nil, nil
		}
		out := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			k, err := json.Marshal(it.Key().Interface())
			if err != nil {
				return nil, err
			}
			key := strings.Trim(string(k), `"`)
			e, err := toJSONValue(it.Value())
			if err != nil {
				return nil, err
			}
			out[key] = e
		}
		return out, nil
	case reflect.Struct:
		var obj object
		if err := appendFields(&obj, v); err != nil {
			return nil, err
		}
		return obj, nil
	}
	return v.Interface(), nil
}

func appendFields(obj *object, v reflect.Value) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv, ft = fv.Elem(), ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := appendFields(obj, fv); err != nil {
					return err
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if strings.Contains(","+opts+",", ",omitempty,") && isEmpty(fv) {
			continue
		}
		e, err := toJSONValue(fv)
		if err != nil {
			return err
		}
		*obj = append(*obj, field{name, e})
	}
	return nil
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return v.IsZero()
}
