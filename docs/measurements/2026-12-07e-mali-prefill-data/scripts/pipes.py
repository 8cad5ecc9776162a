import json,sys
LS=3.4945910084579115
d=json.load(open(sys.argv[1]))
tot=0
rows={}
for x in d['dispatches']:
    key=(x['op'],x['kernel'])
    r=rows.setdefault(key,[0,x])
    r[0]+=x['count']
print(f"{'op':12} {'kernel':58} {'calls':>5} {'FMA':>7} {'CVT':>7} {'SFU':>7} {'LS/rate':>8} {'LSinst':>8} busiest occ spills")
for (op,k),(n,x) in rows.items():
    p=x.get('pipes')
    if not p: print(op,k,'no pipes'); continue
    c=p['cycles']; f=p['loop_factors']
    eff=[c[0]*f[0],c[1]*f[1],c[2]*f[2],c[3]*f[3]/LS]
    names=['FMA','CVT','SFU','LS']
    b=max(range(4),key=lambda i:eff[i])
    print(f"{op:12} {k[:58]:58} {n:5.0f} {eff[0]:7.1f} {eff[1]:7.1f} {eff[2]:7.1f} {eff[3]:8.1f} {c[3]*f[3]:8.0f} {names[b]:4} {x['occupancy']} {x['spills']}")
