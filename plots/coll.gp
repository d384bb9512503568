# Bus bandwidth of the all-reduce against message size, in virtual time, for 8 GPUs in
# one DGX A100 node and 16 GPUs over two (written by `make bench`).
# usage: gnuplot -e "dir='build/bench/out'" plots/coll.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 900,550 noenhanced
set output dir.'/coll_busbw.png'
set datafile separator ','
set key top left
set logscale xy 2
set xtics ('1 KiB' 1024, '16 KiB' 16384, '256 KiB' 262144, '4 MiB' 4194304, \
           '64 MiB' 67108864, '256 MiB' 268435456)
set xlabel 'message size'
set ylabel 'bus bandwidth (GB/s, log scale)'
set title 'pemu coll: all-reduce on dgx-a100 (virtual time)'
set grid
plot dir.'/coll_busbw_1node.csv' every ::1 using 3:7 with linespoints title '8 GPUs, 1 node (NVLink3)', \
     dir.'/coll_busbw_2nodes.csv' every ::1 using 3:7 with linespoints title '16 GPUs, 2 nodes (hierarchical, IB)'
