#!/usr/bin/env python3
"""Point-by-point comparison of bench results (results-gpu.json files) of
several variants, any grid: each variant is NAME:PREFIX, its runs the files
DIR/PREFIX*.json (medians over runs). Prints each point's recall and QPS per
variant with the ratio to the first, the median ratio, and each variant's best
QPS at recall 0.95, 0.99 and 0.995.

  python3 scripts/ab-points.py DIR main:ab-mainA new:ab-newA
"""
import glob
import json
import statistics as st
import sys

d=sys.argv[1]; variants=sys.argv[2:]
def load(f):
    j=json.load(open(f)); out={}
    for p in j['points']:
        if p['system']!='octex GPU': continue
        k=(p['params']['read_depth'],p['params']['start_points'],p['params']['waves'],p['params']['rerank'])
        out[k]=(p['recall'],p['qps'])
    return out
data={}
for v in variants:
    name,pref=v.split(':')
    runs=[load(f) for f in sorted(glob.glob(f'{d}/{pref}*.json'))]
    keys=set(runs[0]);
    data[name]={k:(runs[0][k][0], st.median([r[k][1] for r in runs if k in r])) for k in keys}
names=[v.split(':')[0] for v in variants]
base=names[0]
keys=sorted(set.intersection(*[set(data[n]) for n in names]))
print('r S W R | '+' | '.join(f'{n} rec qps' for n in names))
ratios={n:[] for n in names[1:]}
for k in keys:
    row=[f"{data[n][k][0]:.4f} {data[n][k][1]/1e6:6.2f}M" for n in names]
    for n in names[1:]: ratios[n].append(data[n][k][1]/data[base][k][1])
    print(k, ' | '.join(row), ' '.join(f'{data[n][k][1]/data[base][k][1]-1:+.1%}' for n in names[1:]))
for n in names[1:]:
    print(n,'median',f'{st.median(ratios[n])-1:+.1%}')
def best(n,t):
    c=[v[1] for v in data[n].values() if v[0]>=t]; return max(c) if c else 0
for t in (0.95,0.99,0.995):
    print(t, ' '.join(f'{n} {best(n,t)/1e6:.2f}M' for n in names))
