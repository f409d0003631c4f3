package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Table is a summary for people: rows of values printed in aligned columns,
// numbers right-aligned to four significant figures. Run.WriteTable writes
// the same rows to CSV at full precision.
type Table struct {
	header []string
	rows   [][]any
}

// NewTable starts a table with its column names.
func NewTable(header ...string) *Table { return &Table{header: header} }

// Add appends a row. Missing cells print empty, extra ones are dropped, so a
// half-filled row never shifts the columns.
func (t *Table) Add(cells ...any) {
	row := make([]any, len(t.header))
	copy(row, cells)
	for i := len(cells); i < len(row); i++ {
		row[i] = ""
	}
	t.rows = append(t.rows, row)
}

// Len is the number of rows.
func (t *Table) Len() int { return len(t.rows) }

// WriteTo prints the table: header, a rule, the rows. A column whose cells
// are all numbers is right-aligned.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	cells := make([][]string, len(t.rows))
	width := make([]int, len(t.header))
	numeric := make([]bool, len(t.header))
	for c, h := range t.header {
		width[c] = utf8.RuneCountInString(h)
		numeric[c] = len(t.rows) > 0
	}
	for r, row := range t.rows {
		cells[r] = make([]string, len(row))
		for c, v := range row {
			s := Format(v)
			cells[r][c] = s
			width[c] = max(width[c], utf8.RuneCountInString(s))
			if !isNumber(v) {
				numeric[c] = false
			}
		}
	}
	var b strings.Builder
	line := func(row []string) {
		for c, s := range row {
			if c > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[c]-utf8.RuneCountInString(s))
			if numeric[c] {
				b.WriteString(pad + s)
			} else if c < len(row)-1 {
				b.WriteString(s + pad)
			} else {
				b.WriteString(s) // no trailing blanks
			}
		}
		b.WriteByte('\n')
	}
	line(t.header)
	rule := make([]string, len(t.header))
	for c := range rule {
		rule[c] = strings.Repeat("-", width[c])
	}
	line(rule)
	for _, row := range cells {
		line(row)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// String is the printed table.
func (t *Table) String() string {
	var b strings.Builder
	t.WriteTo(&b)
	return b.String()
}

func isNumber(v any) bool {
	switch v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return true
	}
	return false
}

// Format prints a value for people: floats to four significant figures in
// plain notation between 0.001 and a million (so a column of RTTs reads
// 12.35, 150.2, 1024), in exponent notation outside, NaN as "NaN"; other
// values with %v.
func Format(v any) string {
	var x float64
	switch f := v.(type) {
	case float64:
		x = f
	case float32:
		x = float64(f)
	case string:
		return f
	default:
		return fmt.Sprint(v)
	}
	switch a := math.Abs(x); {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'g', -1, 64)
	case x == 0:
		return "0"
	case a < 1e-3 || a >= 1e6:
		return strconv.FormatFloat(x, 'e', 3, 64)
	default:
		prec := max(0, 3-int(math.Floor(math.Log10(a))))
		return strconv.FormatFloat(x, 'f', prec, 64)
	}
}
