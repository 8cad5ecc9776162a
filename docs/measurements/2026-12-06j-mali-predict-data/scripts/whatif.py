import json,sys
LS=3.4946; EFF=470/512; CORES=4; CLK=1e9; BW=27e9
def cost(x):
    p=x.get('pipes')
    if isinstance(p,dict) and p.get('loop_factors'):
        c,f=p['cycles'],p['loop_factors']
        cyc=max(c[0]*f[0],c[1]*f[1],c[2]*f[2],c[3]*f[3]/LS)
    elif p:
        c=p['cycles'] if isinstance(p,dict) else p
        cyc=max(c[0],c[1],c[2],c[3]/LS)*x['loop_factor']
    else: cyc=x['cycles']*x['loop_factor']
    comp=x['invocations']*cyc/CORES/CLK/EFF; mem=x['bytes']/BW
    return comp,mem
d=json.load(open(sys.argv[1]))
tot=0; memtot=0; per={}
for x in d['dispatches']:
    c,m=cost(x); t=max(c,m)*x['count']; tot+=t; memtot+=m*x['count']
    k=(x['op'],x['kernel']); a=per.setdefault(k,[0,0]); a[0]+=t; a[1]+=m*x['count']
print("tokens",d['tokens'],"total ms",tot*1e3,"tok/s",d['tokens']/tot,"mem-only ms",memtot*1e3, "bound tok/s", d['tokens']/memtot, "ratio", memtot/tot)
for k,v in sorted(per.items(), key=lambda kv:-(kv[1][0]-kv[1][1])):
    print(f"{v[0]*1e3:9.2f} {v[1]*1e3:9.2f} excess {1e3*(v[0]-v[1]):8.2f}  {k[0]} {k[1]}")
