#!/usr/bin/env python3
"""Writes small models exercising what the node suite lacks (every element type
from raw_data and typed fields, every attribute kind, odd names, all type
constructors, functions, external data, doc strings) as OUT/<case>/model.onnx.
Cases named xfail_* hold content the text syntax cannot carry and must fail
the round trip. Usage: tools/make_printer_stress.py OUT; then
tools/check_printer.py OUT."""
import onnx, numpy as np, os, struct
from onnx import helper as h, numpy_helper as nh, TensorProto as T
import sys
OUT=sys.argv[1] if len(sys.argv) > 1 else 'printer_stress'
def save(name, m):
    d=f'{OUT}/{name}'; os.makedirs(d, exist_ok=True)
    with open(f'{d}/model.onnx','wb') as f: f.write(m.SerializeToString())
def model(nodes, inits=(), inputs=(), outputs=None, vi=(), funcs=(), opsets=None, **kw):
    g=h.make_graph(nodes,'g',list(inputs),list(outputs if outputs is not None else [h.make_tensor_value_info('y',1,None)]),initializer=list(inits),value_info=list(vi))
    m=h.make_model(g, opset_imports=opsets or [h.make_opsetid('',21)], functions=list(funcs), **kw)
    return m
def rawt(name, dt, dims, raw):
    t=T(); t.name=name; t.data_type=dt; t.dims.extend(dims); t.raw_data=bytes(raw); return t
# 1 raw data of all types
raw_inits=[
 rawt('f32',1,[6],struct.pack('<6f',1.5,-0.0,float('inf'),float('-inf'),1e-45,3.4028235e38)),
 rawt('f32nan',1,[2],struct.pack('<2I',0x7fc00000,0xffc00000)),
 rawt('u8',2,[3],[0,128,255]), rawt('i8',3,[3],[0,0x80,0xff]),
 rawt('u16',4,[2],struct.pack('<2H',0,65535)), rawt('i16',5,[2],struct.pack('<2h',-32768,32767)),
 rawt('i32',6,[2],struct.pack('<2i',-2**31,2**31-1)), rawt('i64',7,[2],struct.pack('<2q',-2**63,2**63-1)),
 rawt('b',9,[3],[1,0,1]), rawt('f16',10,[2],struct.pack('<2H',0x3c00,0xfe01)), rawt('f64',11,[3],struct.pack('<3d',0.1,-0.0,5e-324)),
 rawt('u32',12,[2],struct.pack('<2I',0,2**32-1)), rawt('u64',13,[2],struct.pack('<2Q',0,2**64-1)),
 rawt('c64',14,[2],struct.pack('<4f',1,2,3,4)), rawt('c128',15,[1],struct.pack('<2d',1.25,-2)),
 rawt('bf16',16,[2],struct.pack('<2H',0x3f80,0x7fc1)),
 rawt('f8a',17,[2],[0x7f,0x01]), rawt('f8b',18,[1],[0x80]), rawt('f8c',19,[1],[0x7d]), rawt('f8d',20,[1],[0x80]),
 rawt('u4',21,[3],[0x21,0x03]), rawt('i4',22,[4],[0xf8,0x71]), rawt('f4',23,[2],[0x7f]), rawt('e8m0',24,[2],[0,255]),
 rawt('u2',25,[5],[0b11100100,0b10]), rawt('i2',26,[4],[0xff]),
 rawt('f6a',27,[5],[0x41,0x20,0xf3,0x15]), rawt('f6b',28,[4],[1,2,3]),
 rawt('scalar',1,[],struct.pack('<f',7)), rawt('empty',1,[0,3],b''),
]
save('raw_all_types', model([h.make_node('Identity',['f32'],['y'])], raw_inits))
# 2 typed fields
def typed(name, dt, dims, vals):
    t=T(); t.name=name; t.data_type=dt; t.dims.extend(dims)
    if dt in (1,14): t.float_data.extend(vals)
    elif dt in (11,15): t.double_data.extend(vals)
    elif dt==7: t.int64_data.extend(vals)
    elif dt in (12,13): t.uint64_data.extend(vals)
    elif dt==8: t.string_data.extend(vals)
    else: t.int32_data.extend(vals)
    return t
typed_inits=[typed('f32',1,[3],[1,float('nan'),-0.0]), typed('i8',3,[2],[-128,127]), typed('u16',4,[1],[65535]),
 typed('b',9,[2],[1,0]), typed('f16',10,[2],[0x3c00,0xfc00]), typed('bf16',16,[1],[0x3f80]), typed('f8',17,[1],[0x7e]),
 typed('i4',22,[3],[0xf8,0x07]), typed('u2',25,[6],[0xe4,0x0a]), typed('f6',27,[5],[1,63,2,3,4]),
 typed('u32',12,[1],[4294967295]), typed('u64',13,[1],[2**64-1]), typed('c64',14,[1],[1.5,-2.5]), typed('c128',15,[1],[0.1,0.2]),
 typed('d',11,[2],[1e300,-1e-300]), typed('i64',7,[1],[-5]),
 typed('s',8,[4],[b'plain', b'q"uote', b'back\\slash', 'uni\u00e9\n'.encode()]),
 typed('i32',6,[2],[-1,2])]
save('typed_all_types', model([h.make_node('Identity',['f32'],['y'])], typed_inits))
# 3 attributes
sub=h.make_graph([h.make_node('Identity',['x'],['z'])],'then_branch',[],[h.make_tensor_value_info('z',1,[2])])
sub2=h.make_graph([h.make_node('Neg',['x'],['z'])],'else_branch',[],[h.make_tensor_value_info('z',1,[2])])
n=h.make_node('Foo',['x','','w'],['y',''],domain='com.microsoft',name='n/1',
  f_int=2.0, f_neg0=-0.0, f_nan=float('nan'), f_inf=float('-inf'), f_sub=1e-40, f_big=1e30, i=-7, i_big=2**63-1,
  s='a"b\\c\nd', fl=[1.0,2.5], il=[1,-2], sl=['x','y"'], t=nh.from_array(np.array([1,2],dtype=np.float32)),
  t_named=nh.from_array(np.array([[1],[2]],dtype=np.int64),'tn'), t_scalar=nh.from_array(np.array(3.5,dtype=np.float64)),
  tp=h.make_tensor_type_proto(1,['N',None,3]), tp2=h.make_sequence_type_proto(h.make_tensor_type_proto(7,None)))
n.attribute.extend([h.make_attribute('empty_f',[],attr_type=onnx.AttributeProto.FLOATS), h.make_attribute('empty_i',[],attr_type=onnx.AttributeProto.INTS), h.make_attribute('empty_s',[],attr_type=onnx.AttributeProto.STRINGS)])
iff=h.make_node('If',['c'],['y2'],then_branch=sub,else_branch=sub2)
save('attributes', model([n,iff],[], [h.make_tensor_value_info('x',1,[2]),h.make_tensor_value_info('c',9,[]),h.make_tensor_value_info('w',1,None)], [h.make_tensor_value_info('y',1,None),h.make_tensor_value_info('y2',1,[2])], opsets=[h.make_opsetid('',21),h.make_opsetid('com.microsoft',1)]))
# 4 types and names
ins=[h.make_tensor_value_info('a.b',1,['N','M+1',None,0]), h.make_value_info('s', h.make_sequence_type_proto(h.make_tensor_type_proto(1,[2]))),
 h.make_value_info('m', h.make_map_type_proto(8, h.make_tensor_type_proto(7,[]))), h.make_value_info('o', h.make_optional_type_proto(h.make_sequence_type_proto(h.make_tensor_type_proto(1,None)))),
 h.make_value_info('sp', h.make_sparse_tensor_type_proto(1,[3,4])), h.make_value_info('sp2', h.make_sparse_tensor_type_proto(1,None)),
 onnx.ValueInfoProto(name='float'), onnx.ValueInfoProto(name='notype'), h.make_tensor_value_info('/l1/Conv_output_0',10,[])]
nodes=[h.make_node('Add',['a.b','/l1/Conv_output_0'],['y'],name='"weird" name'), h.make_node('Identity',['float'],['seq'])]
vi=[h.make_tensor_value_info('seq',1,None), onnx.ValueInfoProto(name='t_only'), h.make_tensor_value_info('x y',7,[1])]
save('types_names', model(nodes,[],ins,[h.make_tensor_value_info('y',1,None), h.make_tensor_value_info('seq',1,None)],vi,
  producer_name='p"rod', producer_version='1.0', domain='ai.test', model_version=3, doc_string='line1\nline2 "q" \\'))
m=onnx.load(f'{OUT}/types_names/model.onnx'); h.set_model_props(m,{'k"1':'v\\1','k2':''}); save('types_names', m)
# 5 functions
lr=h.make_node('LeakyRelu',['T'],['Y']); lr.attribute.append(h.make_attribute_ref('alpha',onnx.AttributeProto.FLOAT))
cst=h.make_node('Constant',[],['C']); cst.attribute.append(h.make_attribute_ref('value_ints',onnx.AttributeProto.INTS)); cst.attribute[0].ref_attr_name='v'
fn=h.make_function('local.dom','MyFn',['X','float'],['Y'],[h.make_node('Mul',['X','float'],['T']), lr, cst],
  [h.make_opsetid('',21)], attributes=['v'], doc_string='fn doc')
fn.attribute_proto.extend([h.make_attribute('alpha',0.5), h.make_attribute('mode','x'), h.make_attribute('e',[],attr_type=onnx.AttributeProto.INTS)])
fn.value_info.extend([h.make_tensor_value_info('T',1,['N']), h.make_tensor_value_info('X',1,None)])
fn.overload='ov1'
fn2=h.make_function('local.dom','NoAttr',[],['Z'],[h.make_node('Constant',[],['Z'],value_float=1.0)],[h.make_opsetid('',21)])
calls=[h.make_node('MyFn',['x','x'],['y'],domain='local.dom',alpha=0.25,v=[1,2]), h.make_node('NoAttr',[],['z'],domain='local.dom')]
calls[0].overload='ov1'
save('functions', model(calls,[],[h.make_tensor_value_info('x',1,[2])],[h.make_tensor_value_info('y',1,[2])], funcs=[fn,fn2], opsets=[h.make_opsetid('',21),h.make_opsetid('local.dom',1)]))
# 6 external data and no ir header stuff
t=T(name='ext', data_type=1, dims=[4]); t.data_location=1; t.external_data.extend([onnx.StringStringEntryProto(key='location',value='w.bin'), onnx.StringStringEntryProto(key='offset',value='0')])
m=model([h.make_node('Identity',['ext'],['y'])],[t]); m.ClearField('ir_version'); save('external', m)
# 7 docs and metadata (dropped by canonicalization)
m=model([h.make_node('Relu',['x'],['y'],doc_string='node doc')],[nh.from_array(np.ones(2,np.float32),'w')],[h.make_tensor_value_info('x',1,[2],doc_string='vi doc')])
m.graph.doc_string='graph doc'; m.graph.initializer[0].doc_string='tdoc'; m.graph.input[0].type.denotation='IMAGE'
m.graph.input[0].type.tensor_type.shape.dim[0].denotation='DATA_BATCH'; save('docs', m)
# 8 expected failures: sparse attr, tensors list, training_info
sp=onnx.SparseTensorProto(values=nh.from_array(np.array([1.0],np.float32),'v'), indices=nh.from_array(np.array([0],np.int64),'i'), dims=[3])
m=model([h.make_node('Constant',[],['y'],sparse_value=sp)]); save('xfail_sparse_attr', m)
n=h.make_node('Foo',[],['y']); n.attribute.extend([h.make_attribute('ts',[nh.from_array(np.ones(1,np.float32))])]); save('xfail_tensors_list', model([n]))
