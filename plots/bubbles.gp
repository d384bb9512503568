# Pipeline bubble against micro-batches a step, for each schedule: measured by the
# emulator (solid) and docs/formulas.md's formula for equal F, B and W times (dashed, in
# the schedule's colour and named in the key).
# Written by `make bench` (bench/pipeline).
# usage: gnuplot -e "dir='build/bench/out'" plots/bubbles.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 900,550 noenhanced
set output dir.'/bubbles.png'
set datafile separator ','
set key top right font ',9'
set logscale x 2
set xlabel 'micro-batches a step (m)'
set ylabel 'bubble (fraction of the step)'
set title 'pemu: pipeline bubble, llama-7b-shape s=1024, pp 4 (measured; dashed: formula)'
set grid
f = dir.'/bubbles.csv'
sel(s) = sprintf('< grep "^%s," %s', s, f)
# GPipe and 1F1B have the same bubble: GPipe is drawn wide beneath 1F1B so both show.
# Each schedule's formula is dashed in its own colour, labelled with the formula.
plot sel('gpipe') using 2:4 with linespoints lw 7 lc rgb '#c0c0ff' pt 7 ps 1.6 title 'gpipe (measured; the same as 1f1b)', \
     sel('1f1b') using 2:4 with linespoints lw 2 lc 1 pt 5 title '1f1b', \
     sel('1f1b') using 2:5 with lines dt 2 lw 1.5 lc 1 title '  formula (p-1)/(m+p-1)', \
     sel('interleaved') using 2:4 with linespoints lw 2 lc 2 pt 9 title 'interleaved (v 2)', \
     sel('interleaved') using 2:5 with lines dt 2 lw 1.5 lc 2 title '  formula (p-1)/(v m+p-1)', \
     sel('zb-h1') using 2:4 with linespoints lw 2 lc 3 pt 11 title 'zb-h1', \
     sel('zb-h1') using 2:5 with lines dt 2 lw 1.5 lc 3 title '  formula (p-1)(F+B-W)/step', \
     sel('zb-h2') using 2:4 with linespoints lw 2 lc 4 pt 13 title 'zb-h2', \
     sel('zb-h2') using 2:5 with lines dt 2 lw 1.5 lc 4 title '  formula: 0 once m >= 2p'
