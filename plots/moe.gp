# Expert parallelism on 64 H100s (a 64-expert MoE, dp 64, ZeRO-1): step time and the share
# of it in expert parallelism's collectives against ep, for both dispatchers; and device
# 0's parameters, gradients and optimizer state against Megatron's distributed-optimizer
# formula. Measured by bench/moe (make bench).
# usage: gnuplot -e "dir='build/bench/out'" plots/moe.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 1350,420 noenhanced
set output dir.'/moe.png'
set datafile separator ','
f = dir.'/moe.csv'
sel(v) = sprintf('< grep -E ",(%s)," %s', v, f)
set logscale x 2
set xrange [0.8:80]
set xlabel 'expert-parallel size (8 GPUs a node)'
set grid
set key top left font ',9'
set multiplot layout 1,3
set title 'step time'
set ylabel 'seconds (virtual)'
plot sel('none|alltoall') using 1:3 with linespoints lw 2 title 'alltoall', \
     sel('none|allgather') using 1:3 with linespoints lw 2 title 'allgather'
set title "expert parallelism's collectives, share of the step"
set ylabel 'percent'
set yrange [0:100]
plot sel('alltoall') using 1:($4*100) with linespoints lw 2 title 'alltoall', \
     sel('allgather') using 1:($4*100) with linespoints lw 2 title 'allgather'
set title 'device 0: parameters, gradients, optimizer state'
set ylabel 'GiB'
set autoscale y
set key right center
plot sel('none|alltoall') using 1:5 with linespoints lw 2 title 'pemu (16-bit gradients)', \
     sel('none|alltoall') using 1:6 with linespoints lw 2 dt 2 title 'Megatron: 6 + 12/dp dense, 6 + 12/EDP experts'
unset multiplot
