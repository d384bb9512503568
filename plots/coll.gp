# Bus bandwidth of the all-reduce against message size, in virtual time, for 8 GPUs in
# one DGX A100 node and 16 GPUs over two (written by `make bench`).
# usage: gnuplot -e "dir='build/bench/out'" plots/coll.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 900,550 noenhanced
set output dir.'/coll_busbw.png'
set datafile separator ','
set key top left
set logscale x 2
set format x '%.0b%B'
set xlabel 'message size (bytes)'
set ylabel 'bus bandwidth (GB/s)'
set title 'pemu coll: all-reduce on dgx-a100 (virtual time)'
set grid
plot dir.'/coll_busbw_1node.csv' every ::1 using 3:7 with linespoints title '8 GPUs, 1 node (NVLink3)', \
     dir.'/coll_busbw_2nodes.csv' every ::1 using 3:7 with linespoints title '16 GPUs, 2 nodes (hierarchical, IB)'
