# HelixPipe against 1F1B with recomputation and ZB-H1: step time against sequence length
# (pipeline.png) and peak activation memory per stage at s = 32k (pipeline_memory.png),
# llama-7b-shape on 64 H20 (tp 8 + sp, pp 8), from bench/pipeline (`make bench`).
# usage: gnuplot -e "dir='build/bench/out'" plots/pipeline.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 900,550 noenhanced
set datafile separator ','
set datafile missing ''
set grid

set output dir.'/pipeline.png'
set key top left
set logscale xy 2
set xrange [7000:150000]
set xtics ('8k' 8192, '16k' 16384, '32k' 32768, '64k' 65536, '128k' 131072)
set xlabel 'sequence length (tokens)'
set ylabel 'step time (virtual s)'
set title 'pemu: llama-7b-shape on 64 H20, pp 8, tp 8 (ZB-H1 stops where it no longer fits)'
f = dir.'/pipeline.csv'
plot f every ::1 using 1:($2/1000) with linespoints lw 2 title 'HelixPipe (recomputation without attention)', \
     f every ::1 using 1:($3/1000) with linespoints lw 2 title '1F1B, full recomputation', \
     f every ::1 using 1:($4/1000) with linespoints lw 2 title 'ZB-H1'

set output dir.'/pipeline_memory.png'
unset logscale
set logscale y 2 # 1F1B's 1-2 GiB beside ZB-H1's 33-57: a log scale shows both
set xtics autofreq
set xrange [*:*]
set yrange [0.75:96]
set ytics (1, 2, 4, 8, 16, 32, 64)
set key outside bottom center horizontal
set xlabel 'pipeline stage'
set ylabel 'peak activation memory (GiB, log scale)'
set title 'pemu: peak activations per stage at s = 32k'
m = dir.'/pipeline_memory.csv'
sel(s) = sprintf('< grep "^%s,32768," %s', s, m)
plot sel('helix') using 3:4 with linespoints lw 2 title 'HelixPipe', \
     sel('1f1b-recompute') using 3:4 with linespoints lw 2 title '1F1B, full recomputation', \
     sel('zb-h1') using 3:4 with linespoints lw 2 title 'ZB-H1'
