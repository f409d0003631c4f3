package sim

import "slices"

func sortInts(xs []int) { slices.Sort(xs) }
