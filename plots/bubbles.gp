# Pipeline bubble against micro-batches a step, for each schedule: measured by the
# emulator (solid) and docs/formulas.md's formula for equal F, B and W times (dashed).
# Written by `make bench` (bench/pipeline).
# usage: gnuplot -e "dir='build/bench/out'" plots/bubbles.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 900,550 noenhanced
set output dir.'/bubbles.png'
set datafile separator ','
set key top right
set logscale x 2
set xlabel 'micro-batches a step (m)'
set ylabel 'bubble (fraction of the step)'
set title 'pemu: pipeline bubble, llama-7b-shape s=1024, pp 4 (measured; dashed: formula)'
set grid
f = dir.'/bubbles.csv'
sel(s) = sprintf('< grep "^%s," %s', s, f)
plot for [s in "gpipe 1f1b interleaved zb-h1 zb-h2"] sel(s) using 2:4 with linespoints lw 2 title s, \
     for [s in "1f1b interleaved zb-h1 zb-h2"] sel(s) using 2:5 with lines dt 2 lc 'gray' notitle
