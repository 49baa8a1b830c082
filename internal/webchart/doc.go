// Package webchart holds the small chart library (inline JavaScript drawing
// SVG) that the master's live dashboard and loadgen's HTML report embed in
// their pages, so both stay single self-contained files with no network.
package webchart

import _ "embed"

// JS defines lineChart(el, spec) and heatMap(el, spec); see chart.js.
//
//go:embed chart.js
var JS string
