// Package report writes what an experiment produced where a reader expects
// it: results/<experiment>/<run-id>/ holding results.json (every parameter,
// the seed among them, and the results), one CSV file per table, and every
// plot twice, as PNG to look at and SVG to put in a paper.
//
// It also prints for people: Table aligns a summary on stdout, and Progress
// reports a long build or convergence on a terminal with a redrawn bar, and
// in a log or CI output, where \r would make a mess, with an occasional line.
//
// Plots are drawn with gonum.org/v1/plot. NaN and infinite values, which the
// metrics package returns for empty samples, are dropped from plots and
// written as null in JSON (JSON has no such numbers), so one empty run never
// stops a report from being written.
package report
