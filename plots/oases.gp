# Oases's throughput against Megatron's (full recomputation) for each hidden size, on the
# NVLink and the PCIe RTX 3090 clusters: measured by the emulator (bench/oases), with the
# plan pemu plan --oases picks, beside the paper's figures. Written by `make bench`.
# usage: gnuplot -e "dir='build/bench/out'" plots/oases.gp
if (!exists("dir")) dir = 'build/bench/out'
set terminal pngcairo size 1100,450 noenhanced
set output dir.'/oases.png'
set datafile separator ','
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:2.6]
set ylabel 'throughput / Megatron'
set xlabel 'hidden size (layers: 24, 24, 24, 16, 16, 8, 4)'
set grid ytics
set key top center horizontal font ',9'
f = dir.'/oases.csv'
sel(c) = sprintf('< grep "^%s,.*,oases," %s', c, f)
plan(c) = sprintf('< grep "^%s,.*,plan " %s', c, f)
set multiplot layout 1,2
set title 'rtx3090-nvlink: Oases (emulated) and the paper'
plot sel('rtx3090-nvlink') using 8:xtic(2) title 'pemu: Oases', \
     plan('rtx3090-nvlink') using 8 title 'pemu: searched plan', \
     sel('rtx3090-nvlink') using 9 title 'paper'
set title 'rtx3090-pcie: Oases (emulated) and the paper'
plot sel('rtx3090-pcie') using 8:xtic(2) title 'pemu: Oases', \
     plan('rtx3090-pcie') using 8 title 'pemu: searched plan', \
     sel('rtx3090-pcie') using 9 title 'paper'
unset multiplot
