# Context parallelism on llama-7b-shape, 64 H100s (tp 8 + sp, cp 4, dp 2): step time and
# context parallelism's exposed communication against the sequence, for the ring, the
# contiguous (unbalanced) ring, all-gather and Ulysses; and each layout's slowest and
# fastest cp rank in the attention kernels. Measured by bench/long_context (make bench).
# usage: gnuplot -e "dir='build/bench/out'" plots/long_context.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 1350,420 noenhanced
set output dir.'/long_context.png'
set datafile separator ','
f = dir.'/long_context.csv'
sel(v) = sprintf('< grep ",%s," %s', v, f)
set logscale xy 2
set xrange [6500:160000]
set xtics ('8k' 8192, '16k' 16384, '32k' 32768, '64k' 65536, '128k' 131072)
set xlabel 'sequence length'
set grid
set key top left font ',9'
set multiplot layout 1,3
set title 'step time'
set ylabel 'seconds (virtual)'
plot for [v in 'ring contiguous all_gather ulysses'] sel(v) using 1:3 with linespoints lw 2 title v
set title 'exposed context-parallel communication'
set ylabel 'seconds (virtual), worst cp rank'
plot for [v in 'ring contiguous all_gather ulysses'] sel(v) using 1:4 with linespoints lw 2 title v
set title 'attention kernels: slowest / fastest cp rank'
set ylabel 'ratio'
unset logscale y
set yrange [0:8]
plot sel('ring') using 1:($7/$6) with linespoints lw 2 title 'ring (balanced)', \
     sel('contiguous') using 1:($7/$6) with linespoints lw 2 title 'contiguous ring'
unset multiplot
