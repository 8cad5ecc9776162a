import json,sys
# floor.py LIST: the compute-bound dispatches' busiest-pipe cycles summed (invocations x cycles),
# as they are and with the load/store pipe left out (what the arithmetic pipes alone would take)
LS=3.4945910084579115
d=json.load(open(sys.argv[1]))
cur=nols=gem=gem_nols=0
by={}
for x in d['dispatches']:
    p=x.get('pipes')
    if not p: continue
    c=p['cycles']; f=p['loop_factors']
    eff=[c[0]*f[0],c[1]*f[1],c[2]*f[2],c[3]*f[3]/LS]
    w=x['count']*x['invocations']
    cur+=w*max(eff); nols+=w*max(eff[:3])
    names=['FMA','CVT','SFU','LS']
    b=names[max(range(4),key=lambda i:eff[i])]
    by[b]=by.get(b,0)+w*max(eff)
print(f"busiest-pipe work: {cur:.4g}; without load/store {nols:.4g}: x{cur/nols:.3f}")
print("share by busiest pipe:", {k: round(v/cur,3) for k,v in by.items()})
