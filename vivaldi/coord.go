package vivaldi

import "math"

// Coord is a point in Vivaldi space: a Euclidean part, a height (the access
// link every path to this node crosses) and the node's own error estimate.
// Distances are in seconds of RTT.
type Coord struct {
	Vec    []float64
	Height float64
	Error  float64
}

// DistanceTo is the predicted RTT in seconds between c and o: the Euclidean
// distance of the vectors plus both heights. Coordinates of different
// dimensions are incomparable: the result is NaN.
func (c Coord) DistanceTo(o Coord) float64 {
	if len(c.Vec) != len(o.Vec) {
		return math.NaN()
	}
	var sum float64
	for i := range c.Vec {
		d := c.Vec[i] - o.Vec[i]
		sum += d * d
	}
	return math.Sqrt(sum) + c.Height + o.Height
}

// maxDimensions bounds the Euclidean part of a coordinate that we accept, so
// a peer cannot make us allocate or compute over a huge vector.
const maxDimensions = 32

// maxComponent bounds every component, height and error of a coordinate we
// accept (seconds, or dimensionless for Error). Real coordinates stay within
// a few RTTs of the origin, and RTTs are at most 10 s; a finite but huge
// value would overflow a distance to Inf, so it is refused like Inf.
const maxComponent = 1000

// newCoord is the origin in dims dimensions with the given height and error.
func newCoord(dims int, height, err float64) Coord {
	return Coord{Vec: make([]float64, dims), Height: height, Error: err}
}

// Clone is a deep copy: Coord holds a slice, and handing out our own would
// let a caller change our state.
func (c Coord) Clone() Coord {
	c.Vec = append([]float64(nil), c.Vec...)
	return c
}

// Check reports why c is not a coordinate we would store or accept: a NaN or
// infinite component (ErrNonFinite), a component, height or error beyond
// MaxComponent or a negative height or error (ErrOutOfRange), or more than
// MaxDimensions dimensions (ErrDimensions).
func (c Coord) Check() error {
	if len(c.Vec) == 0 || len(c.Vec) > maxDimensions {
		return ErrDimensions
	}
	for _, v := range c.Vec {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ErrNonFinite
		}
		if math.Abs(v) > maxComponent {
			return ErrOutOfRange
		}
	}
	for _, v := range [...]float64{c.Height, c.Error} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ErrNonFinite
		}
		if v < 0 || v > maxComponent {
			return ErrOutOfRange
		}
	}
	return nil
}
