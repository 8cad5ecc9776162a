import json, subprocess, sys, os, re, tempfile
# usage: sweep.py BIN DRIVER(25|26) M N K WEIGHT [filter-substring] < schedules (one JSON per line) or --space
S25=os.path.expanduser('~/.cache/rocky/mali-shim-25.0.7'); S26=os.path.expanduser('~/.cache/rocky/mali-shim26-26.1.6')
LS=float(os.environ.get('LS','3.4946'))
def stats(binp, drv, m,n,k,w, sched=None, layout='auto'):
    env=dict(os.environ, BIFROST_MESA_DEBUG='shaderdb', XDG_CACHE_HOME=tempfile.mkdtemp())
    cmd=(['sh',S25+'/run.sh',S25] if drv=='25' else [S26+'/run-26.sh'])+[binp,'kernel','--m',str(m),'--n',str(n),'--k',str(k),'--weight',w,'--layout',layout,'--stats']
    if sched: cmd+=['--schedule',json.dumps(sched)]
    out=subprocess.run(cmd,env=env,stdout=subprocess.PIPE,stderr=subprocess.STDOUT,text=True).stdout
    r={}
    for line in out.splitlines():
        mm=re.search(r'MESA_SHADER_COMPUTE shader: (\d+) inst\w*, ([\d.]+) cycles, ([\d.]+) fma, ([\d.]+) cvt, ([\d.]+) sfu.*?([\d.]+) ls.*?(\d+) threads, (\d+) loops, (\d+):(\d+) spills',line)
        if mm:
            g=mm.groups(); r=dict(inst=int(g[0]),fma=float(g[2]),cvt=float(g[3]),sfu=float(g[4]),ls=float(g[5]),threads=int(g[6]),loops=int(g[7]),spills=int(g[8]),fills=int(g[9]))
        if line.startswith('schedule'):
            r['schedule']=json.loads(line.split(None,1)[1])['gemm']
        if line.startswith('kernel'):
            r['kernel']=line.split()[1].rstrip(':')
    if not r.get('schedule'): r['err']=out[-300:]+' '
    return r
def cost(r,m,n,k):
    s=r['schedule']; pipe=max(r['fma'],r['cvt'],r['sfu'],r['ls']/LS)
    inv=m*n/(s['tm']*s['tn']); trips=k/(s['bk']*s.get('k_unroll',1))
    return pipe, pipe*trips*inv/(m*n*k)  # busiest cycles per MAC (approx)
if __name__=='__main__':
    binp,drv,m,n,k,w=sys.argv[1:7]; m,n,k=int(m),int(n),int(k)
    layout=sys.argv[7] if len(sys.argv)>7 else 'auto'
    for line in sys.stdin:
        line=line.strip()
        sched=json.loads(line) if line and line!='default' else None
        r=stats(binp,drv,m,n,k,w,sched,layout)
        if 'fma' not in r: print('ERR',line,r.get('err','')[-200:].replace('\n',' ')); continue
        p,c=cost(r,m,n,k)
        print(json.dumps(dict(cpm=round(c,5),busy=p,**{x:r[x] for x in ['fma','cvt','sfu','ls','threads','spills','fills','inst']},kernel=r.get('kernel'),schedule=r['schedule'])),flush=True)
