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
