"""op_sac_probe.py — which ops torchtitan's per-op selective activation checkpointing (--activation-checkpointing
selective-op) saves in one zerobench decoder block, on CPU: a torch block equal to models/llama.cpp block_forward
(tiny's shapes: H 128, 4 heads, 2 kv heads, F 352, B 2, T 128; causal, and with an additive per-document mask),
its forward ops under a TorchDispatchMode, then the block under torch.utils.checkpoint with
create_selective_checkpoint_contexts and torchtitan's policy (llama3's _op_sac_save_list of the selective_ac_option
releases, and the centralised list built from get_default_op_list() since #2357), printing each mm / SDPA op and
whether it was saved or recomputed, in forward and in the recompute. Run: python scripts/op_sac_probe.py (the venv).
Result with torch 2.11: the 1st, 3rd, 5th, 7th mm (wq, wv, w_gate, w_down) saved; the CPU SDPA op
(_scaled_dot_product_flash_attention_for_cpu) is in neither list and is recomputed.
"""
import torch, torch.nn.functional as F
from collections import defaultdict
from functools import partial
from torch.utils.checkpoint import checkpoint, CheckpointPolicy, create_selective_checkpoint_contexts
from torch.utils._python_dispatch import TorchDispatchMode
torch.manual_seed(0)
B,T,H,nh,nkv,Fd = 2,128,128,4,2,352
hd=H//nh
def rms(x,w,eps=1e-5):
    xf=x.float(); return w*(xf*torch.rsqrt(xf.pow(2).mean(-1,keepdim=True)+eps)).to(x.dtype)
def rope(x,cos,sin):
    h=x.shape[-1]//2; x1,x2=x[...,:h],x[...,h:]
    return x*cos+torch.cat([-x2,x1],-1)*sin
W=[torch.ones(H)]+[torch.randn(o,i)*0.02 for o,i in [(H,H),(nkv*hd,H),(nkv*hd,H),(H,H)]]+[torch.ones(H)]+[torch.randn(o,i)*0.02 for o,i in [(Fd,H),(Fd,H),(H,Fd)]]
W=[w.requires_grad_() for w in W]
ang=torch.outer(torch.arange(T).float(), 10000**(-torch.arange(0,hd,2).float()/hd)); emb=torch.cat([ang,ang],-1)
cos,sin=emb.cos(),emb.sin()
def block(x,W,mask=None):
    h=rms(x,W[0])
    q=F.linear(h,W[1]).view(B,T,nh,hd).transpose(1,2)
    k=F.linear(h,W[2]).view(B,T,nkv,hd).transpose(1,2)
    v=F.linear(h,W[3]).view(B,T,nkv,hd).transpose(1,2)
    q=rope(q,cos,sin); k=rope(k,cos,sin)
    a=F.scaled_dot_product_attention(q,k,v,attn_mask=mask,is_causal=mask is None,enable_gqa=nkv!=nh)
    x1=x+F.linear(a.transpose(1,2).reshape(B,T,H),W[4])
    h2=rms(x1,W[5])
    return x1+F.linear(F.silu(F.linear(h2,W[6]))*F.linear(h2,W[7]),W[8])
old_list={torch.ops.aten.mm.default,torch.ops.aten.linear.default,torch.ops.aten._scaled_dot_product_efficient_attention.default,
 torch.ops.aten._scaled_dot_product_flash_attention.default,torch.ops.aten._scaled_dot_product_cudnn_attention.default,
 torch.ops.aten._scaled_dot_product_attention_math.default,torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default,
 torch.ops._c10d_functional.reduce_scatter_tensor.default,torch.ops.aten.max.default}
from torch._functorch.partitioners import get_default_op_list
new_list={op.default for op in get_default_op_list().compute_intensive_ops}|{torch.ops.aten._scaled_dot_product_cudnn_attention.default,
 torch.ops.aten._scaled_dot_product_attention_math.default,torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default,
 torch.ops.aten.max.default,torch.ops.aten.linear.default,torch.ops.aten.topk.default,torch.ops._c10d_functional.reduce_scatter_tensor.default}
mm_ops=(torch.ops.aten.mm.default,torch.ops.aten.linear.default)
log=[]
def make_policy(save_list):
    meta=defaultdict(int)
    def pol(ctx,func,*args,**kw):
        mode="recompute" if ctx.is_recompute else "forward"; key=mode+"_mm_count"
        if func in mm_ops: meta[key]+=1
        to_save=func in save_list and not (func in mm_ops and meta[key]%2==0)
        extra=""
        if func in mm_ops: extra=f" mm#{meta[key]} rhs={tuple(args[1].shape)}"
        log.append((mode,str(func),"SAVE" if to_save else "recompute",extra))
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE
    return pol
class Ops(TorchDispatchMode):
    def __init__(s): super().__init__(); s.ops=[]
    def __torch_dispatch__(s,func,types,args=(),kwargs=None):
        s.ops.append(str(func)); return func(*args,**(kwargs or {}))
for masked in [False,True]:
    mask=None
    if masked:
        m=torch.ones(T,T,dtype=torch.bool).tril(); m[64:,:64]=False
        mask=torch.zeros(B,1,T,T).masked_fill(~m,float('-inf'))
    x=torch.randn(B,T,H,requires_grad=True)
    with Ops() as o: block(x,W,mask)
    print("masked" if masked else "causal", "forward ops:", [f for f in o.ops if f not in ('aten.view.default','aten.t.default','aten.transpose.int','aten.slice.Tensor','aten._unsafe_view.default','aten.expand.default')])
    for name,lst in [("old llama3 _op_sac_save_list",old_list),("new centralized",new_list)]:
        log.clear()
        y=checkpoint(block,x,W,mask,use_reentrant=False,context_fn=lambda: create_selective_checkpoint_contexts(make_policy(lst)))
        y.sum().backward()
        print(" ",name, [(m,f,s,e) for m,f,s,e in log if s=="SAVE" or "mm" in f or "scaled" in f or "bmm" in f])
