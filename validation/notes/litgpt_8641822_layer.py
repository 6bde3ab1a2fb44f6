"""lit-gpt 8641822's LoRA Llama block (lit_gpt/lora.py LoRAQKVLinear with zero_pad, lit_gpt/model.py
CausalSelfAttention + apply_rope, lit_gpt/rmsnorm.py, LLaMAMLP), q and v adapters r 8, dropout 0.05,
bf16, frozen base: the tensors autograd keeps for backward, per storage, in units of s*b*h bytes.
Attention is an autograd.Function that keeps what flash attention keeps (q, k, v, out, fp32 lse).

Run: /usr/bin/python3 validation/notes/litgpt_8641822_layer.py  (torch 1.13 CPU; see
published-finetune.md for the two places where CUDA torch 2.1 keeps less: the dropout mask is bool,
1 byte, not bf16; mean() keeps only sizes, not its input x*x, validation/emulated_ops.py).
Result on 1.13: 6 (qkv, kept by v) + 4 (zero_pad's index_copy keeps its source) + 9 x 2 + 6*s*b*f/(s*b*h)."""
import torch, torch.nn as nn, torch.nn.functional as F, math
torch.manual_seed(0)
B,T,h,nh,f,r = 1, 64, 256, 4, 688, 8
hs=h//nh
dt=torch.bfloat16
class RMSNorm(nn.Module):
    def __init__(s,n): super().__init__(); s.weight=nn.Parameter(torch.ones(n,dtype=dt)); s.eps=1e-5
    def forward(s,x):
        norm_x=torch.mean(x*x,dim=-1,keepdim=True); x_normed=x*torch.rsqrt(norm_x+s.eps); return s.weight*x_normed
class QKV(nn.Module):
    def __init__(s):
        super().__init__(); s.linear=nn.Linear(h,3*h,bias=False,dtype=dt)
        s.lora_A=nn.Parameter(torch.randn(r*2,h,dtype=dt)); s.lora_B=nn.Parameter(torch.randn(2*h,r,dtype=dt))
        s.drop=nn.Dropout(0.05); s.scaling=2.0
        s.lora_ind=list(range(0,h))+list(range(2*h,3*h))
    def zero_pad(s,x):
        x=x.transpose(0,1); result=x.new_zeros((*x.shape[:-1],3*h)); result=result.view(-1,3*h)
        result=result.index_copy(1,torch.tensor(s.lora_ind),x.reshape(-1,2*h))
        return result.view((*x.shape[:-1],3*h)).transpose(0,1)
    def forward(s,x):
        pre=s.linear(x); after_A=F.linear(s.drop(x),s.lora_A)
        after_B=F.conv1d(after_A.transpose(-2,-1),s.lora_B.unsqueeze(-1),groups=2).transpose(-2,-1)
        return pre+s.zero_pad(after_B)*s.scaling
def rope_cache():
    theta=1.0/(10000**(torch.arange(0,hs,2)/hs)); idx=torch.outer(torch.arange(T).float(),theta).repeat(1,2)
    return torch.cos(idx), torch.sin(idx)
def apply_rope(x,cos,sin):
    x1=x[...,:hs//2]; x2=x[...,hs//2:]; rot=torch.cat((-x2,x1),dim=-1); return ((x*cos)+(rot*sin)).type_as(x)
class Attn(nn.Module):
    def __init__(s): super().__init__(); s.attn=QKV(); s.proj=nn.Linear(h,h,bias=False,dtype=dt)
    def forward(s,x,cos,sin,sdpa):
        qkv=s.attn(x).view(B,T,nh,3,hs).permute(0,2,3,1,4); q,k,v=qkv.split((1,1,1),dim=2)
        q=q.reshape(B,-1,T,hs); k=k.reshape(B,-1,T,hs); v=v.reshape(B,-1,T,hs)
        q=torch.cat((apply_rope(q,cos,sin),q[...,hs:]),dim=-1); k=torch.cat((apply_rope(k,cos,sin),k[...,hs:]),dim=-1)
        y=sdpa(q,k,v); return s.proj(y.transpose(1,2).reshape(B,T,h))
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.n1=RMSNorm(h); s.attn=Attn(); s.n2=RMSNorm(h)
        s.fc1=nn.Linear(h,f,bias=False,dtype=dt); s.fc2=nn.Linear(h,f,bias=False,dtype=dt); s.pj=nn.Linear(f,h,bias=False,dtype=dt)
    def forward(s,x,cos,sin,sdpa):
        x=x+s.attn(s.n1(x),cos,sin,sdpa); n=s.n2(x); return x+s.pj(F.silu(s.fc1(n))*s.fc2(n))
blk=Block()
for n,p in blk.named_parameters(): p.requires_grad_('lora_' in n)
saved={}
class Flash(torch.autograd.Function):  # flash: keeps q, k, v, out, lse (fp32 B·nh·T)
    @staticmethod
    def forward(ctx,q,k,v):
        att=(q.float()@k.float().transpose(-1,-2)/math.sqrt(hs)).masked_fill(torch.triu(torch.ones(T,T,dtype=torch.bool),1),float('-inf'))
        out=(att.softmax(-1)@v.float()).to(dt); lse=torch.zeros(B,nh,T); ctx.save_for_backward(q,k,v,out,lse); return out
    @staticmethod
    def backward(ctx,g): q,k,v,_,_=ctx.saved_tensors; return torch.zeros_like(q),torch.zeros_like(k),torch.zeros_like(v)
def pack(t):
    st=t.untyped_storage() if hasattr(t,'untyped_storage') else t.storage()
    key=st.data_ptr(); saved[key]=max(saved.get(key,0), st.nbytes() if hasattr(st,'nbytes') else st.size()*t.element_size()); return t
x=torch.randn(B,T,h,dtype=dt,requires_grad=True)
cos,sin=rope_cache()
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t:t):
    y=blk(x,cos,sin,Flash.apply)
params={p.data_ptr() for p in blk.parameters()}
tot=sum(v for k,v in saved.items() if k not in params and k!=cos.data_ptr() and k!=sin.data_ptr())
sbh=B*T*h
print("saved bytes", tot, "= %.3f sbh + 6 sbf -> remainder/sbh %.3f" % (tot/sbh, (tot-6*B*T*f)/sbh))
for k,v in sorted(saved.items(), key=lambda kv:-kv[1]):
    if k in params or k in (cos.data_ptr(), sin.data_ptr()): continue
    print("  %8d B = %.3f sbh = %.3f sbf" % (v, v/sbh, v/(B*T*f)))
print("---- by node")
seen=set(); stack=[y.grad_fn]
while stack:
    n=stack.pop()
    if n is None or n in seen: continue
    seen.add(n)
    for a in dir(n):
        if a.startswith('_saved_'):
            try: t=getattr(n,a)
            except Exception: continue
            if isinstance(t,torch.Tensor) and t.numel()>=B*T:
                if t.data_ptr() in params: continue
                print("  %-28s %-14s %s %s %.3f sbh" % (type(n).__name__, a, tuple(t.shape), t.dtype, t.untyped_storage().nbytes()/sbh if hasattr(t,'untyped_storage') else t.storage().size()*t.element_size()/sbh))
    for nf,_ in n.next_functions: stack.append(nf)
